/*
 * NiFiRecords: runs Apache NiFi 2.11's own record readers and writers (compiled from NiFi's source
 * by build.sh) outside NiFi, with the settings the controller services have by default.
 *
 *   read  FORMAT FILE [--schema AVRO_SCHEMA_FILE | --infer] [--header]
 *       FORMAT avro: AvroReader. Default "Use Embedded Avro Schema" (AvroReaderWithEmbeddedSchema);
 *              --schema: "Use 'Schema Text' Property" (AvroReaderWithExplicitSchema, as AvroReader does).
 *       FORMAT json: JsonTreeReader (JsonTreeRowRecordReader). --schema: the schema text (AvroSchemaTextStrategy:
 *              AvroTypeUtil.createSchema); --infer (the JsonTreeReader default): InferSchemaAccessStrategy with
 *              JsonSchemaInference.
 *       FORMAT csv:  CSVReader (CSVRecordReader, Apache Commons CSV). --schema: schema text, with
 *              "Treat First Line as Header" = true (without --header: false, NiFi's default);
 *              --infer (the CSVReader default): InferSchemaAccessStrategy with CSVRecordSource + CSVSchemaInference
 *              (the header is then always read as the field names, as CSVReader does).
 *     Prints one JSON line {"schema": [...]} (NiFi's RecordSchema: field names, DataTypes, nullable, aliases), then
 *     one JSON line per record: {"field": {"c": Java class, "v": value as NiFi holds it}}. An exception: one line
 *     {"error": ...} on stdout, the stack trace on stderr, exit status 2.
 *
 *   write FORMAT SCHEMA_FILE RECORDS_JSONL OUT
 *     NiFi's writer with its default settings: AvroRecordSetWriter (WriteAvroResultWithSchema, embedded schema, no
 *     compression), JsonRecordSetWriter (WriteJsonResult: output-array, no pretty print, nulls written, no scientific
 *     notation, no date/time/timestamp format) or CSVRecordSetWriter (WriteCSVResult with CSVUtils' custom format and
 *     the header line). The record schema is the Avro schema in SCHEMA_FILE as NiFi reads schema text
 *     (AvroTypeUtil.createSchema). RECORDS_JSONL: one JSON object per record, each value as the AvroReader would hold
 *     it: decimals as strings -> BigDecimal, timestamps as epoch ms -> java.sql.Timestamp, dates "yyyy-mm-dd" ->
 *     java.sql.Date (midnight in the JVM's zone, as AvroTypeUtil makes it), bytes as hex -> Object[] of Byte, floats
 *     as numbers or "NaN"/"Infinity"/"-Infinity"/"-0.0", maps as objects (LinkedHashMap), arrays as Object[], records
 *     as MapRecord.
 *
 *   schema AVRO_SCHEMA_FILE     prints the RecordSchema NiFi makes of an Avro schema (AvroTypeUtil.createSchema)
 *
 * Run with -Duser.timezone=UTC (run_matrix.py does): NiFi turns DATE values into midnight of the JVM's zone.
 */

import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.avro.Schema;
import org.apache.avro.file.CodecFactory;
import org.apache.commons.csv.CSVFormat;
import org.apache.nifi.NullSuppression;
import org.apache.nifi.avro.AvroReaderWithEmbeddedSchema;
import org.apache.nifi.avro.AvroReaderWithExplicitSchema;
import org.apache.nifi.avro.AvroTypeUtil;
import org.apache.nifi.avro.WriteAvroResultWithSchema;
import org.apache.nifi.csv.CSVRecordReader;
import org.apache.nifi.csv.CSVRecordSource;
import org.apache.nifi.csv.CSVSchemaInference;
import org.apache.nifi.csv.CSVUtils;
import org.apache.nifi.csv.WriteCSVResult;
import org.apache.nifi.json.JsonParserFactory;
import org.apache.nifi.json.JsonRecordSource;
import org.apache.nifi.json.JsonSchemaInference;
import org.apache.nifi.json.JsonTreeRowRecordReader;
import org.apache.nifi.json.OutputGrouping;
import org.apache.nifi.json.ParsingStrategy;
import org.apache.nifi.json.SchemaApplicationStrategy;
import org.apache.nifi.json.StartingFieldStrategy;
import org.apache.nifi.json.TokenParserFactory;
import org.apache.nifi.json.WriteJsonResult;
import org.apache.nifi.logging.ComponentLog;
import org.apache.nifi.schema.access.NopSchemaAccessWriter;
import org.apache.nifi.schema.inference.InferSchemaAccessStrategy;
import org.apache.nifi.schema.inference.TimeValueInference;
import org.apache.nifi.serialization.RecordReader;
import org.apache.nifi.serialization.RecordSetWriter;
import org.apache.nifi.serialization.record.DataType;
import org.apache.nifi.serialization.record.MapRecord;
import org.apache.nifi.serialization.record.Record;
import org.apache.nifi.serialization.record.RecordField;
import org.apache.nifi.serialization.record.RecordSchema;
import org.apache.nifi.serialization.record.type.ArrayDataType;
import org.apache.nifi.serialization.record.type.ChoiceDataType;
import org.apache.nifi.serialization.record.type.DecimalDataType;
import org.apache.nifi.serialization.record.type.MapDataType;
import org.apache.nifi.serialization.record.type.RecordDataType;

import java.io.ByteArrayInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.time.ZoneId;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

public class NiFiRecords {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
    /** A ComponentLog that prints to stderr (nifi-api is not compiled; see stubs/). */
    private static final ComponentLog LOG = new ComponentLog() { };

    public static void main(final String[] args) throws Exception {
        final PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        if (args.length < 1) {
            usage();
        }
        try {
            switch (args[0]) {
                case "read" -> read(args, out);
                case "write" -> write(args);
                case "schema" -> out.println(schemaJson(AvroTypeUtil.createSchema(new Schema.Parser().parse(Files.readString(Path.of(args[1]))))));
                default -> usage();
            }
        } catch (final Throwable t) {
            t.printStackTrace();
            final ObjectNode err = NODES.objectNode();
            err.put("error", messages(t));
            out.println(MAPPER.writeValueAsString(err));
            out.flush();
            System.exit(2);
        }
    }

    private static void usage() {
        System.err.println("usage: NiFiRecords read FORMAT FILE [--schema AVRO_SCHEMA_FILE | --infer] [--header]\n"
                + "       NiFiRecords write FORMAT SCHEMA_FILE RECORDS_JSONL OUT\n"
                + "       NiFiRecords schema AVRO_SCHEMA_FILE");
        System.exit(64);
    }

    /** The message of an exception and of its causes, joined. */
    private static String messages(Throwable t) {
        final StringBuilder sb = new StringBuilder();
        while (t != null) {
            if (!sb.isEmpty()) {
                sb.append(" <- caused by ");
            }
            sb.append(t.getClass().getName()).append(": ").append(t.getMessage());
            t = t.getCause();
        }
        return sb.toString();
    }

    // -- settings the controller services have by default -------------------------------------------------------

    /** JsonTreeReader: "Parsing Strategy" STANDARD, "Max String Length" 20 MB (AbstractJsonRowRecordReader). */
    private static TokenParserFactory jsonTokenParserFactory() {
        final int maxStringLength = 20 * 1024 * 1024;
        return new JsonParserFactory(StreamReadConstraints.builder().maxStringLength(maxStringLength).build(), ParsingStrategy.STANDARD);
    }

    /** CSVUtils.createCSVFormat with the properties a CSVReader/CSVRecordSetWriter has by default (see stubs/). */
    private static CSVFormat csvFormat(final Map<String, String> properties) {
        return CSVUtils.createCSVFormat(new DefaultsContext(properties), Collections.emptyMap());
    }

    // -- read ----------------------------------------------------------------------------------------------------

    private static void read(final String[] args, final PrintStream out) throws Exception {
        final String format = args[1];
        final byte[] content = Files.readAllBytes(Path.of(args[2]));
        String schemaFile = null;
        boolean infer = false;
        boolean header = false;
        for (int i = 3; i < args.length; i++) {
            switch (args[i]) {
                case "--schema" -> schemaFile = args[++i];
                case "--infer" -> infer = true;
                case "--header" -> header = true;
                default -> usage();
            }
        }
        final String schemaText = schemaFile == null ? null : Files.readString(Path.of(schemaFile));
        // AvroSchemaTextStrategy: new Schema.Parser().parse(text), then AvroTypeUtil.createSchema
        final RecordSchema textSchema = schemaText == null ? null : AvroTypeUtil.createSchema(new Schema.Parser().parse(schemaText));
        final InputStream in = new ByteArrayInputStream(content);  // mark/reset, as the inference strategy needs

        final RecordReader reader;
        switch (format) {
            case "avro" -> {
                if (textSchema == null) {
                    reader = new AvroReaderWithEmbeddedSchema(in, true);
                } else {
                    reader = new AvroReaderWithExplicitSchema(in, textSchema, new Schema.Parser().parse(schemaText), true);
                }
            }
            case "json" -> {
                final TokenParserFactory tokens = jsonTokenParserFactory();
                final RecordSchema schema;
                if (textSchema != null) {
                    schema = textSchema;
                } else if (infer) {
                    schema = new InferSchemaAccessStrategy<JsonNode>(
                            (variables, stream) -> new JsonRecordSource(stream, StartingFieldStrategy.ROOT_NODE, null, tokens),
                            new JsonSchemaInference(new TimeValueInference(null, null, null)), LOG)
                            .getSchema(Collections.emptyMap(), in, null);
                } else {
                    throw new IllegalArgumentException("json needs --schema or --infer");
                }
                reader = new JsonTreeRowRecordReader(in, LOG, schema, null, null, null, StartingFieldStrategy.ROOT_NODE, null,
                        SchemaApplicationStrategy.SELECTED_PART, null, tokens);
            }
            case "csv" -> {
                final RecordSchema schema;
                final boolean firstLineIsHeader;
                final Map<String, String> properties = new LinkedHashMap<>();
                if (textSchema != null) {
                    schema = textSchema;
                    firstLineIsHeader = header;
                    if (header) {
                        properties.put(CSVUtils.FIRST_LINE_IS_HEADER.getName(), "true");
                    }
                } else if (infer) {
                    final DefaultsContext context = new DefaultsContext(properties);
                    schema = new InferSchemaAccessStrategy<>(
                            (variables, stream) -> new CSVRecordSource(stream, context, variables),
                            new CSVSchemaInference(new TimeValueInference(null, null, null)), LOG)
                            .getSchema(Collections.emptyMap(), in, null);
                    firstLineIsHeader = true;  // CSVReader: inferring a schema forces "Treat First Line as Header"
                } else {
                    throw new IllegalArgumentException("csv needs --schema or --infer");
                }
                // CSVReader.createRecordReader with its defaults: "Ignore CSV Header Column Names" false, UTF-8,
                // "Trim double quote" true (only shown for RFC 4180, but read regardless)
                reader = new CSVRecordReader(in, LOG, schema, csvFormat(properties), firstLineIsHeader, false, null, null, null, "UTF-8", true);
            }
            default -> throw new IllegalArgumentException("unknown format " + format);
        }

        try (reader) {
            final RecordSchema schema = reader.getSchema();
            final ObjectNode head = NODES.objectNode();
            head.set("schema", schemaJson(schema));
            out.println(MAPPER.writeValueAsString(head));
            Record record;
            while ((record = reader.nextRecord()) != null) {  // coerceTypes and dropUnknownFields true, as processors read
                out.println(MAPPER.writeValueAsString(recordJson(record)));
            }
        }
    }

    // -- how NiFi's types and values are shown -------------------------------------------------------------------

    static String typeName(final DataType type) {
        if (type instanceof DecimalDataType d) {
            return "DECIMAL(" + d.getPrecision() + "," + d.getScale() + ")";
        } else if (type instanceof ArrayDataType a) {
            return "ARRAY<" + typeName(a.getElementType()) + ">" + (a.isElementsNullable() ? "" : "!");
        } else if (type instanceof MapDataType m) {
            return "MAP<" + typeName(m.getValueType()) + ">";
        } else if (type instanceof ChoiceDataType c) {
            final List<String> names = new ArrayList<>();
            for (final DataType sub : c.getPossibleSubTypes()) {
                names.add(typeName(sub));
            }
            return "CHOICE" + names;
        } else if (type instanceof RecordDataType r) {
            final List<String> names = new ArrayList<>();
            for (final RecordField f : r.getChildSchema().getFields()) {
                names.add(f.getFieldName() + ":" + typeName(f.getDataType()) + (f.isNullable() ? "" : "!"));
            }
            return "RECORD{" + String.join(",", names) + "}";
        }
        return type.getFormat() == null ? type.getFieldType().name() : type.getFieldType().name() + ":" + type.getFormat();
    }

    static ArrayNode schemaJson(final RecordSchema schema) {
        final ArrayNode fields = NODES.arrayNode();
        for (final RecordField f : schema.getFields()) {
            final ObjectNode node = fields.addObject();
            node.put("name", f.getFieldName());
            node.put("type", typeName(f.getDataType()));
            node.put("nullable", f.isNullable());
            if (!f.getAliases().isEmpty()) {
                final ArrayNode aliases = node.putArray("aliases");
                f.getAliases().forEach(aliases::add);
            }
            if (f.getDefaultValue() != null) {
                node.put("default", String.valueOf(f.getDefaultValue()));
            }
        }
        return fields;
    }

    static ObjectNode recordJson(final Record record) {
        // the schema's fields in order, then any other field the record holds
        final ObjectNode node = NODES.objectNode();
        for (final String name : record.getSchema().getFieldNames()) {
            node.set(name, cell(record.getValue(name)));
        }
        for (final String name : record.getRawFieldNames()) {
            if (!node.has(name)) {
                node.set(name, cell(record.getValue(name)));
            }
        }
        return node;
    }

    /** {"c": class, "v": value}, the value shown so that nothing of it is lost. */
    static JsonNode cell(final Object value) {
        if (value == null) {
            return NODES.nullNode();
        }
        final ObjectNode node = NODES.objectNode();
        node.put("c", value.getClass().getName());
        switch (value) {
            case Boolean b -> node.put("v", b);
            case Byte b -> node.put("v", b.intValue());
            case Short s -> node.put("v", s.intValue());
            case Integer i -> node.put("v", i);
            case Long l -> node.put("v", l);
            case Float f -> node.put("v", Float.toString(f));
            case Double d -> node.put("v", Double.toString(d));
            case BigDecimal d -> {
                node.put("v", d.toPlainString());
                node.put("scale", d.scale());
            }
            case java.math.BigInteger b -> node.put("v", b.toString());
            case String s -> node.put("v", s);
            case java.sql.Timestamp t -> {
                node.put("v", t.getTime());
                node.put("nanos", t.getNanos());
                node.put("text", t.toString());
            }
            case java.sql.Date d -> {
                node.put("v", d.getTime());
                node.put("text", d.toString());
                // the day this Date stands for in the JVM's zone, in the proleptic Gregorian calendar
                // (toString() uses the Julian calendar before 1582)
                node.put("day", java.time.Instant.ofEpochMilli(d.getTime()).atZone(ZoneId.systemDefault()).toLocalDate().toString());
            }
            case java.sql.Time t -> {
                node.put("v", t.getTime());
                node.put("text", t.toString());
            }
            case java.util.Date d -> node.put("v", d.getTime());
            case byte[] bytes -> node.put("v", HexFormat.of().formatHex(bytes));
            case Object[] array -> {
                boolean allBytes = array.length > 0;
                for (final Object o : array) {
                    allBytes &= o instanceof Byte;
                }
                if (allBytes) {
                    final byte[] bytes = new byte[array.length];
                    for (int i = 0; i < array.length; i++) {
                        bytes[i] = (Byte) array[i];
                    }
                    node.put("c", "Object[] of java.lang.Byte");
                    node.put("v", HexFormat.of().formatHex(bytes));
                } else {
                    final ArrayNode items = node.putArray("v");
                    for (final Object o : array) {
                        items.add(cell(o));
                    }
                }
            }
            case Map<?, ?> map -> {
                final ObjectNode entries = node.putObject("v");
                for (final Map.Entry<?, ?> e : map.entrySet()) {
                    entries.set(String.valueOf(e.getKey()), cell(e.getValue()));
                }
            }
            case Record r -> node.set("v", recordJson(r));
            default -> node.put("v", value.toString());  // LocalDate, Instant, ... : their ISO text
        }
        return node;
    }

    // -- write ---------------------------------------------------------------------------------------------------

    private static void write(final String[] args) throws Exception {
        final String format = args[1];
        final String schemaText = Files.readString(Path.of(args[2]));
        final RecordSchema schema = AvroTypeUtil.createSchema(new Schema.Parser().parse(schemaText));
        final List<Record> records = new ArrayList<>();
        for (final String line : Files.readAllLines(Path.of(args[3]), StandardCharsets.UTF_8)) {
            if (!line.isBlank()) {
                records.add(toRecord(MAPPER.readTree(line), schema));
            }
        }
        try (OutputStream out = new FileOutputStream(args[4])) {
            final RecordSetWriter writer = switch (format) {
                // AvroRecordSetWriter: a schema from Avro text is compiled from that text; "Schema Write Strategy"
                // avro-embedded; "Compression Format" NONE -> CodecFactory.nullCodec()
                case "avro" -> new WriteAvroResultWithSchema(new Schema.Parser().parse(schema.getSchemaText().orElseThrow()), out,
                        CodecFactory.nullCodec());
                // JsonRecordSetWriter: "Schema Write Strategy" no-schema, pretty print false, never-suppress,
                // output-array, no date/time/timestamp formats, mime type application/json, "Allow Scientific Notation"
                // false, serialized input handling enabled
                case "json" -> new WriteJsonResult(LOG, schema, new NopSchemaAccessWriter(), out, false, NullSuppression.NEVER_SUPPRESS,
                        OutputGrouping.OUTPUT_ARRAY, null, null, null, "application/json", false, true);
                // CSVRecordSetWriter: custom format from CSVUtils, "Include Header Line" true, UTF-8, Commons CSV writer
                case "csv" -> new WriteCSVResult(csvFormat(new LinkedHashMap<>()), schema, new NopSchemaAccessWriter(), out,
                        null, null, null, true, "UTF-8");
                default -> throw new IllegalArgumentException("unknown format " + format);
            };
            // as AbstractRecordProcessor (ConvertRecord) drives a writer
            writer.beginRecordSet();
            for (final Record record : records) {
                writer.write(record);
            }
            writer.finishRecordSet();
            writer.close();
        }
    }

    private static MapRecord toRecord(final JsonNode node, final RecordSchema schema) {
        final Map<String, Object> values = new LinkedHashMap<>();
        for (final RecordField field : schema.getFields()) {
            final JsonNode value = node.get(field.getFieldName());
            values.put(field.getFieldName(), toValue(value, field.getDataType(), field.getFieldName()));
        }
        return new MapRecord(schema, values);
    }

    private static Object toValue(final JsonNode node, final DataType type, final String where) {
        if (node == null || node.isNull()) {
            return null;
        }
        switch (type.getFieldType()) {
            case BOOLEAN: return node.booleanValue();
            case BYTE: return (byte) node.intValue();
            case SHORT: return (short) node.intValue();
            case INT: return node.intValue();
            case LONG: return node.longValue();
            case BIGINT: return node.bigIntegerValue();
            case FLOAT: return node.isTextual() ? Float.parseFloat(node.textValue()) : node.floatValue();
            case DOUBLE: return node.isTextual() ? Double.parseDouble(node.textValue()) : node.doubleValue();
            case DECIMAL: return new BigDecimal(node.asText());
            case STRING: return node.textValue();
            case DATE: {
                // as AvroTypeUtil.normalizeValue makes a DATE: midnight of that day in the JVM's zone
                final LocalDate day = LocalDate.parse(node.textValue());
                return new java.sql.Date(day.atStartOfDay(ZoneId.systemDefault()).toInstant().toEpochMilli());
            }
            case TIMESTAMP: return new java.sql.Timestamp(node.longValue());
            case ARRAY: {
                final DataType element = ((ArrayDataType) type).getElementType();
                if (node.isTextual() && element.getFieldType() == org.apache.nifi.serialization.record.RecordFieldType.BYTE) {
                    return AvroTypeUtil.convertByteArray(HexFormat.of().parseHex(node.textValue()));  // Object[] of Byte
                }
                final List<Object> items = new ArrayList<>();
                for (final JsonNode item : node) {
                    items.add(toValue(item, element, where + "[]"));
                }
                return items.toArray();
            }
            case MAP: {
                final DataType valueType = ((MapDataType) type).getValueType();
                final Map<String, Object> map = new LinkedHashMap<>();
                for (final Iterator<Map.Entry<String, JsonNode>> it = node.fields(); it.hasNext(); ) {
                    final Map.Entry<String, JsonNode> e = it.next();
                    map.put(e.getKey(), toValue(e.getValue(), valueType, where + "." + e.getKey()));
                }
                return map;
            }
            case RECORD: return toRecord(node, ((RecordDataType) type).getChildSchema());
            case CHOICE: {
                // a union other than [null, T]: take the first sub-type the value converts to
                for (final DataType sub : ((ChoiceDataType) type).getPossibleSubTypes()) {
                    try {
                        return toValue(node, sub, where);
                    } catch (final RuntimeException ignored) {
                        // next
                    }
                }
                throw new IllegalArgumentException(where + ": no type of " + type + " holds " + node);
            }
            default: throw new IllegalArgumentException(where + ": cannot make a " + type + " value of " + node);
        }
    }
}
