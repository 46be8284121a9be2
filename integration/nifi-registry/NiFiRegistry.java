/*
 * NiFi 2.11's own Confluent Schema Registry client and Confluent reference reader/writer, run by hand against a
 * registry (the reference server's `s2s serve --schema-registry`). Built by build.sh; driven by run.py.
 *
 *   NiFiRegistry id URL ID                 RestSchemaRegistryClient.getSchema(int): the RecordSchema's identifier and
 *                                          the schema text, as ConfluentSchemaRegistry.retrieveSchema(id) gets them
 *   NiFiRegistry name URL SUBJECT [VERSION] RestSchemaRegistryClient.getSchema(name[, version]) (no version: latest)
 *   NiFiRegistry definition URL ID         RestSchemaRegistryClient.getSchemaDefinition(id)
 *   NiFiRegistry read URL FILE             AvroReader, "Use 'Schema Reference Reader'": the
 *                                          ConfluentEncodedSchemaReferenceReader takes the id from the content, the
 *                                          client fetches the schema by id (ConfluentSchemaRegistry.retrieveSchema),
 *                                          AvroReaderWithExplicitSchema reads the rest; one JSON line per record
 *   NiFiRegistry write URL SUBJECT VERSION RECORDS.jsonl OUT
 *                                          AvroRecordSetWriter with "Schema Reference Writer" =
 *                                          ConfluentEncodedSchemaReferenceWriter: the schema looked up by name and
 *                                          version, WriteAvroResultWithExternalSchema with the reference writer's
 *                                          header, the records (JSON objects of the schema's flat fields) as datums
 *
 * Output: one JSON object per line; cells {"c": Java class, "v": value as text} (BigDecimal plain, byte[] hex,
 * java.sql.Timestamp epoch ms, java.sql.Date yyyy-mm-dd). A failure prints {"error": ...} and exits 2.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.avro.Schema;
import org.apache.nifi.avro.AvroReaderWithExplicitSchema;
import org.apache.nifi.avro.WriteAvroResultWithExternalSchema;
import org.apache.nifi.confluent.schemaregistry.ConfluentEncodedSchemaReferenceReader;
import org.apache.nifi.confluent.schemaregistry.ConfluentEncodedSchemaReferenceWriter;
import org.apache.nifi.confluent.schemaregistry.client.RestSchemaRegistryClient;
import org.apache.nifi.logging.ComponentLog;
import org.apache.nifi.schema.access.SchemaReferenceWriterSchemaAccessWriter;
import org.apache.nifi.schemaregistry.services.SchemaDefinition;
import org.apache.nifi.serialization.RecordReader;
import org.apache.nifi.serialization.record.DataType;
import org.apache.nifi.serialization.record.MapRecord;
import org.apache.nifi.serialization.record.Record;
import org.apache.nifi.serialization.record.RecordField;
import org.apache.nifi.serialization.record.RecordFieldType;
import org.apache.nifi.serialization.record.RecordSchema;
import org.apache.nifi.serialization.record.SchemaIdentifier;

import java.io.BufferedInputStream;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.LinkedBlockingQueue;

public class NiFiRegistry {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final ComponentLog LOG = new ComponentLog() { };

    public static void main(final String[] args) throws Exception {
        try {
            final RestSchemaRegistryClient client = new RestSchemaRegistryClient(List.of(args[1]), 10_000, null, null,
                    null, LOG, Map.of());
            switch (args[0]) {
                case "id" -> System.out.println(schemaJson(client.getSchema(Integer.parseInt(args[2]))));
                case "name" -> System.out.println(schemaJson(args.length > 3
                        ? client.getSchema(args[2], Integer.parseInt(args[3])) : client.getSchema(args[2])));
                case "definition" -> {
                    final SchemaDefinition d = client.getSchemaDefinition(
                            SchemaIdentifier.builder().schemaVersionId(Long.parseLong(args[2])).build());
                    final ObjectNode node = MAPPER.createObjectNode();
                    node.put("type", d.getSchemaType().toString());
                    node.set("identifier", identifierJson(d.getIdentifier()));
                    node.put("text", d.getText());
                    System.out.println(node);
                }
                case "read" -> read(client, Path.of(args[2]));
                case "write" -> write(client, args[2], Integer.parseInt(args[3]), Path.of(args[4]), Path.of(args[5]));
                default -> throw new IllegalArgumentException("unknown command " + args[0]);
            }
        } catch (final Exception e) {
            final ObjectNode error = MAPPER.createObjectNode();
            final StringBuilder sb = new StringBuilder();
            for (Throwable t = e; t != null; t = t.getCause()) {
                sb.append(sb.length() == 0 ? "" : " <- ").append(t.getClass().getSimpleName()).append(": ").append(t.getMessage());
            }
            error.put("error", sb.toString());
            System.out.println(error);
            System.exit(2);
        }
    }

    private static ObjectNode identifierJson(final SchemaIdentifier id) {
        final ObjectNode node = MAPPER.createObjectNode();
        id.getName().ifPresent(n -> node.put("name", n));
        id.getIdentifier().ifPresent(i -> node.put("id", i));
        id.getVersion().ifPresent(v -> node.put("version", v));
        id.getSchemaVersionId().ifPresent(v -> node.put("schemaVersionId", v));
        return node;
    }

    private static ObjectNode schemaJson(final RecordSchema schema) {
        final ObjectNode node = MAPPER.createObjectNode();
        node.set("identifier", identifierJson(schema.getIdentifier()));
        node.put("text", schema.getSchemaText().orElse(null));
        final ObjectNode fields = node.putObject("fields");
        for (final RecordField f : schema.getFields()) {
            fields.put(f.getFieldName(), f.getDataType().toString());
        }
        return node;
    }

    private static void read(final RestSchemaRegistryClient client, final Path file) throws Exception {
        try (InputStream in = new BufferedInputStream(new FileInputStream(file.toFile()))) {
            // SchemaReferenceReaderSchemaAccessStrategy.getSchema: the reference from the content, then the registry
            final SchemaIdentifier id = new ConfluentEncodedSchemaReferenceReader().getSchemaIdentifier(Map.of(), in);
            // ConfluentSchemaRegistry.retrieveSchema(identifier) with no name: retrieveSchemaById
            final RecordSchema schema = client.getSchema((int) id.getSchemaVersionId().getAsLong());
            final Schema avro = new Schema.Parser().parse(schema.getSchemaText().orElseThrow());
            final ObjectNode head = MAPPER.createObjectNode();
            head.set("identifier", identifierJson(schema.getIdentifier()));
            System.out.println(head);
            final RecordReader reader = new AvroReaderWithExplicitSchema(in, schema, avro);
            Record record;
            while ((record = reader.nextRecord()) != null) {
                final ObjectNode row = MAPPER.createObjectNode();
                for (final String name : schema.getFieldNames()) {
                    row.set(name, cell(record.getValue(name)));
                }
                System.out.println(row);
            }
        }
    }

    private static JsonNode cell(final Object value) {
        if (value == null) {
            return MAPPER.nullNode();
        }
        final ObjectNode node = MAPPER.createObjectNode();
        node.put("c", value.getClass().getName());
        final String text;
        if (value instanceof BigDecimal d) {
            text = d.toPlainString();
        } else if (value instanceof byte[] b) {
            text = HexFormat.of().formatHex(b);
        } else if (value instanceof java.sql.Timestamp t) {
            text = String.valueOf(t.getTime());
        } else if (value instanceof Object[] a && a.length > 0 && a[0] instanceof Byte) {  // NiFi's ARRAY<BYTE>
            final byte[] b = new byte[a.length];
            for (int i = 0; i < a.length; i++) {
                b[i] = (Byte) a[i];
            }
            text = HexFormat.of().formatHex(b);
        } else if (value instanceof Object[] a) {
            final StringBuilder sb = new StringBuilder("[");
            for (int i = 0; i < a.length; i++) {
                sb.append(i == 0 ? "" : ", ").append(cell(a[i]));
            }
            text = sb.append(']').toString();
        } else {
            text = value.toString();
        }
        node.put("v", text);
        return node;
    }

    private static void write(final RestSchemaRegistryClient client, final String subject, final int version,
                              final Path records, final Path out) throws Exception {
        // ConfluentSchemaRegistry.retrieveSchema(name, version): the RecordSchema with its id and version
        final RecordSchema schema = client.getSchema(subject, version);
        final Schema avro = new Schema.Parser().parse(schema.getSchemaText().orElseThrow());
        final SchemaReferenceWriterSchemaAccessWriter access =
                new SchemaReferenceWriterSchemaAccessWriter(new ConfluentEncodedSchemaReferenceWriter());
        access.validateSchema(schema);  // as SchemaRegistryRecordSetWriter does before writing
        int count = 0;
        try (OutputStream os = new FileOutputStream(out.toFile());
             WriteAvroResultWithExternalSchema writer = new WriteAvroResultWithExternalSchema(avro, schema, access, os,
                     new LinkedBlockingQueue<>(), LOG)) {
            writer.beginRecordSet();
            for (final String line : Files.readAllLines(records, StandardCharsets.UTF_8)) {
                if (line.isBlank()) {
                    continue;
                }
                writer.write(toRecord(MAPPER.readTree(line), schema));
                count++;
            }
            writer.finishRecordSet();
        }
        final ObjectNode done = MAPPER.createObjectNode();
        done.put("written", count);
        done.set("identifier", identifierJson(schema.getIdentifier()));
        System.out.println(done);
    }

    /** A JSON object of flat values as the record NiFi's readers would hold (decimals as strings, timestamps as
     * epoch ms, dates yyyy-mm-dd, bytes as hex). */
    private static Record toRecord(final JsonNode node, final RecordSchema schema) {
        final Map<String, Object> values = new LinkedHashMap<>();
        for (final RecordField f : schema.getFields()) {
            final JsonNode v = node.get(f.getFieldName());
            values.put(f.getFieldName(), v == null || v.isNull() ? null : value(v, f.getDataType()));
        }
        return new MapRecord(schema, values);
    }

    private static Object value(final JsonNode v, final DataType type) {
        DataType t = type;
        if (t.getFieldType() == RecordFieldType.CHOICE) {
            t = ((org.apache.nifi.serialization.record.type.ChoiceDataType) t).getPossibleSubTypes().get(0);
        }
        return switch (t.getFieldType()) {
            case BOOLEAN -> v.asBoolean();
            case INT -> v.asInt();
            case LONG -> v.asLong();
            case FLOAT -> (float) v.asDouble();
            case DOUBLE -> v.asDouble();
            case DECIMAL -> new BigDecimal(v.asText());
            case TIMESTAMP -> new java.sql.Timestamp(v.asLong());
            case DATE -> java.sql.Date.valueOf(v.asText());
            case ARRAY -> {
                final byte[] bytes = HexFormat.of().parseHex(v.asText());
                final Object[] boxed = new Object[bytes.length];
                for (int i = 0; i < bytes.length; i++) {
                    boxed[i] = bytes[i];
                }
                yield boxed;
            }
            default -> v.asText();
        };
    }
}
