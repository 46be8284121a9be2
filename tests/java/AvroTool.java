/*
 * Test harness: Apache Avro Java (the library NiFi's AvroReader and AvroRecordSetWriter are built on)
 * reading and writing Avro for the Python test suite. Compiled by tests/javaavro.py with javac against
 * the jars inside pyspark's jars/ folder (Avro, Jackson, slf4j-api, commons-compress and the codecs).
 *
 *   read FILE                                     container file -> header line + one typed-JSON line per record
 *   read-bare SCHEMA_FILE FILE                    bare concatenated binary datums, read until EOF
 *   write SCHEMA_FILE RECORDS_JSONL OUT [CODEC]   typed-JSON records -> container (codec "null" by default)
 *   write-bare SCHEMA_FILE RECORDS_JSONL OUT      typed-JSON records -> bare datums (blocking binary encoder)
 *   serve                                         one JSON command per stdin line, one JSON answer per stdout line
 *
 * Any failure: exit status 1 with the exception class and message (and its causes) on stderr; in serve mode
 * the answer is {"ok": false, "error": ..., "trace": ...} and the server goes on.
 *
 * Typed JSON (decided by the schema): null; boolean; int/long -> integer; float/double -> number (a float is
 * printed as its exact value widened to double), non-finite as "NaN", "Infinity", "-Infinity"; string;
 * bytes/fixed -> lowercase hex; decimal -> BigDecimal.toPlainString(); date -> LocalDate.toString();
 * time-millis/-micros -> microseconds of the day; timestamp-millis/-micros and local-timestamp-millis/-micros
 * -> microseconds since the epoch (at UTC); uuid -> string; enum -> symbol; record -> object; array -> list;
 * map -> object; union -> null, the branch's value, or {"@branch": i, "value": v} when the union has more
 * than one non-null branch (always so when reading; accepted when writing, else the first branch that
 * accepts the value is taken).
 */

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.StreamWriteConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.avro.Conversions;
import org.apache.avro.LogicalType;
import org.apache.avro.Schema;
import org.apache.avro.data.TimeConversions;
import org.apache.avro.file.CodecFactory;
import org.apache.avro.file.DataFileReader;
import org.apache.avro.file.DataFileWriter;
import org.apache.avro.file.SeekableByteArrayInput;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.IndexedRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.Encoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.io.ResolvingDecoder;

import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

public final class AvroTool {

    static {
        // no slf4j provider is on the classpath: keep slf4j's own "no providers" notice off stderr
        System.setProperty("slf4j.internal.verbosity", "ERROR");
    }

    private static final ObjectMapper MAPPER = newMapper();
    private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
    private static final HexFormat HEX = HexFormat.of();
    private static final GenericData MODEL = newModel();

    private AvroTool() {
    }

    /** A union value with the index of its branch: what the reader yields and the writer takes. */
    static final class Branch {
        final int index;
        final Object value;

        Branch(int index, Object value) {
            this.index = index;
            this.value = value;
        }
    }

    /** Result of a read: the header ({"schema", "codec"}) and the records in typed JSON. */
    record ReadResult(ObjectNode header, List<JsonNode> records) {
    }

    private static ObjectMapper newMapper() {
        JsonFactory factory = JsonFactory.builder()
            .streamReadConstraints(StreamReadConstraints.builder()
                .maxStringLength(Integer.MAX_VALUE)
                .maxNumberLength(Integer.MAX_VALUE)
                .maxNestingDepth(100_000)
                .maxDocumentLength(-1L)
                .build())
            .streamWriteConstraints(StreamWriteConstraints.builder().maxNestingDepth(100_000).build())
            .build();
        // JSON numbers with a fraction or exponent are read as doubles (Double.parseDouble: exact for what
        // Python's repr prints, -0.0 kept); a decimal is given as a string, so it stays exact
        return new ObjectMapper(factory);
    }

    private static GenericData newModel() {
        GenericData model = new GenericData();
        // the classic resolving path (which keeps each union's branch): NiFi's NonCachingDatumReader reads
        // through it too, never through Avro's FastReaderBuilder
        model.setFastReaderEnabled(false);
        model.addLogicalTypeConversion(new Conversions.DecimalConversion());
        model.addLogicalTypeConversion(new TimeConversions.DateConversion());
        model.addLogicalTypeConversion(new TimeConversions.TimeMillisConversion());
        model.addLogicalTypeConversion(new TimeConversions.TimeMicrosConversion());
        model.addLogicalTypeConversion(new TimeConversions.TimestampMillisConversion());
        model.addLogicalTypeConversion(new TimeConversions.TimestampMicrosConversion());
        model.addLogicalTypeConversion(new TimeConversions.LocalTimestampMillisConversion());
        model.addLogicalTypeConversion(new TimeConversions.LocalTimestampMicrosConversion());
        model.addLogicalTypeConversion(new Conversions.UUIDConversion());
        return model;
    }

    /** GenericDatumReader that keeps each union's branch index (as a Branch) and each map's order. */
    static final class TaggedReader extends GenericDatumReader<Object> {
        TaggedReader(Schema schema) {
            super(schema, schema, MODEL);
        }

        TaggedReader() {
            super(null, null, MODEL);
        }

        @Override
        protected Object readWithoutConversion(Object old, Schema expected, ResolvingDecoder in) throws IOException {
            if (expected.getType() == Schema.Type.UNION) {
                int index = in.readIndex();
                return new Branch(index, read(null, expected.getTypes().get(index), in));
            }
            return super.readWithoutConversion(old, expected, in);
        }

        @Override
        protected Object newMap(Object old, int size) {
            return new LinkedHashMap<Object, Object>();
        }
    }

    /** GenericDatumWriter that writes a Branch as the branch it names. */
    static final class TaggedWriter extends GenericDatumWriter<Object> {
        TaggedWriter(Schema schema) {
            super(schema, MODEL);
        }

        @Override
        protected int resolveUnion(Schema union, Object datum) {
            if (datum instanceof Branch) {
                return ((Branch) datum).index;
            }
            return super.resolveUnion(union, datum);
        }

        @Override
        protected void write(Schema schema, Object datum, Encoder out) throws IOException {
            if (datum instanceof Branch && schema.getType() != Schema.Type.UNION) {
                datum = ((Branch) datum).value;
            }
            super.write(schema, datum, out);
        }
    }

    // ---------------------------------------------------------------- Avro datum -> typed JSON

    static JsonNode toJson(Schema schema, Object datum) {
        if (datum instanceof BigDecimal) {
            return NODES.textNode(((BigDecimal) datum).toPlainString());
        }
        if (datum instanceof LocalDate) {
            return NODES.textNode(datum.toString());
        }
        if (datum instanceof LocalTime) {
            return NODES.numberNode(((LocalTime) datum).toNanoOfDay() / 1000L);
        }
        if (datum instanceof Instant) {
            Instant t = (Instant) datum;
            return NODES.numberNode(Math.addExact(Math.multiplyExact(t.getEpochSecond(), 1_000_000L), t.getNano() / 1000L));
        }
        if (datum instanceof LocalDateTime) {
            LocalDateTime t = (LocalDateTime) datum;
            return NODES.numberNode(Math.addExact(
                Math.multiplyExact(t.toEpochSecond(ZoneOffset.UTC), 1_000_000L), t.getNano() / 1000L));
        }
        if (datum instanceof UUID) {
            return NODES.textNode(datum.toString());
        }
        switch (schema.getType()) {
            case NULL:
                return NODES.nullNode();
            case BOOLEAN:
                return NODES.booleanNode((Boolean) datum);
            case INT:
                return NODES.numberNode((Integer) datum);
            case LONG:
                return NODES.numberNode((Long) datum);
            case FLOAT:
                return doubleNode(((Float) datum).doubleValue());
            case DOUBLE:
                return doubleNode((Double) datum);
            case STRING:
            case ENUM:
                return NODES.textNode(datum.toString());
            case BYTES: {
                ByteBuffer buffer = ((ByteBuffer) datum).duplicate();
                byte[] bytes = new byte[buffer.remaining()];
                buffer.get(bytes);
                return NODES.textNode(HEX.formatHex(bytes));
            }
            case FIXED:
                return NODES.textNode(HEX.formatHex(((GenericFixed) datum).bytes()));
            case RECORD: {
                IndexedRecord record = (IndexedRecord) datum;
                ObjectNode node = NODES.objectNode();
                for (Schema.Field field : schema.getFields()) {
                    node.set(field.name(), toJson(field.schema(), record.get(field.pos())));
                }
                return node;
            }
            case ARRAY: {
                ArrayNode node = NODES.arrayNode();
                for (Object item : (Collection<?>) datum) {
                    node.add(toJson(schema.getElementType(), item));
                }
                return node;
            }
            case MAP: {
                ObjectNode node = NODES.objectNode();
                for (Map.Entry<?, ?> entry : ((Map<?, ?>) datum).entrySet()) {
                    node.set(entry.getKey().toString(), toJson(schema.getValueType(), entry.getValue()));
                }
                return node;
            }
            case UNION: {
                Branch branch = (Branch) datum;
                Schema type = schema.getTypes().get(branch.index);
                if (type.getType() == Schema.Type.NULL) {
                    return NODES.nullNode();
                }
                JsonNode value = toJson(type, branch.value);
                if (nonNullBranches(schema) < 2) {
                    return value;
                }
                ObjectNode node = NODES.objectNode();
                node.put("@branch", branch.index);
                node.set("value", value);
                return node;
            }
            default:
                throw new IllegalStateException("unknown Avro type " + schema.getType());
        }
    }

    private static JsonNode doubleNode(double value) {
        if (Double.isNaN(value)) {
            return NODES.textNode("NaN");
        }
        if (Double.isInfinite(value)) {
            return NODES.textNode(value > 0 ? "Infinity" : "-Infinity");
        }
        return NODES.numberNode(value);
    }

    private static int nonNullBranches(Schema union) {
        int count = 0;
        for (Schema type : union.getTypes()) {
            if (type.getType() != Schema.Type.NULL) {
                count++;
            }
        }
        return count;
    }

    // ---------------------------------------------------------------- typed JSON -> Avro datum

    private static String logicalName(Schema schema) {
        LogicalType logical = schema.getLogicalType();
        if (logical == null || MODEL.getConversionFor(logical) == null) {
            return null;
        }
        return logical.getName();
    }

    private static IllegalArgumentException mismatch(Schema schema, JsonNode node) {
        String type = schema.getLogicalType() != null
            ? schema.getType().getName() + "/" + schema.getLogicalType().getName() : schema.getType().getName();
        return new IllegalArgumentException("typed JSON " + node + " is not a value of " + type);
    }

    private static long integral(Schema schema, JsonNode node) {
        if (!node.isIntegralNumber() || !node.canConvertToLong()) {
            throw mismatch(schema, node);
        }
        return node.longValue();
    }

    private static double floating(Schema schema, JsonNode node) {
        if (node.isNumber()) {
            return node.doubleValue();
        }
        if (node.isTextual()) {
            switch (node.textValue()) {
                case "NaN":
                    return Double.NaN;
                case "Infinity":
                    return Double.POSITIVE_INFINITY;
                case "-Infinity":
                    return Double.NEGATIVE_INFINITY;
                default:
                    break;
            }
        }
        throw mismatch(schema, node);
    }

    private static String text(Schema schema, JsonNode node) {
        if (!node.isTextual()) {
            throw mismatch(schema, node);
        }
        return node.textValue();
    }

    private static BigDecimal decimal(Schema schema, JsonNode node) {
        if (node.isTextual()) {
            return new BigDecimal(node.textValue());
        }
        if (node.isIntegralNumber()) {
            return new BigDecimal(node.bigIntegerValue());
        }
        throw new IllegalArgumentException("typed JSON " + node + " for a decimal: give it as a string (exact), not"
            + " as a JSON number with a fraction (a double)");
    }

    private static Instant instantOfMicros(long micros) {
        return Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L), Math.floorMod(micros, 1_000_000L) * 1000L);
    }

    static Object fromJson(Schema schema, JsonNode node) {
        String logical = logicalName(schema);
        switch (schema.getType()) {
            case NULL:
                if (!node.isNull()) {
                    throw mismatch(schema, node);
                }
                return null;
            case BOOLEAN:
                if (!node.isBoolean()) {
                    throw mismatch(schema, node);
                }
                return node.booleanValue();
            case INT: {
                if ("date".equals(logical)) {
                    return LocalDate.parse(text(schema, node));
                }
                long value = integral(schema, node);
                if ("time-millis".equals(logical)) {
                    return LocalTime.ofNanoOfDay(Math.multiplyExact(value, 1000L));
                }
                return Math.toIntExact(value);
            }
            case LONG: {
                long value = integral(schema, node);
                if (logical == null) {
                    return value;
                }
                switch (logical) {
                    case "time-micros":
                        return LocalTime.ofNanoOfDay(Math.multiplyExact(value, 1000L));
                    case "timestamp-millis":
                    case "timestamp-micros":
                        return instantOfMicros(value);
                    case "local-timestamp-millis":
                    case "local-timestamp-micros": {
                        Instant t = instantOfMicros(value);
                        return LocalDateTime.ofEpochSecond(t.getEpochSecond(), t.getNano(), ZoneOffset.UTC);
                    }
                    default:
                        return value;
                }
            }
            case FLOAT:
                return (float) floating(schema, node);
            case DOUBLE:
                return floating(schema, node);
            case STRING:
                if ("uuid".equals(logical)) {
                    return UUID.fromString(text(schema, node));
                }
                return text(schema, node);
            case BYTES:
                if ("decimal".equals(logical)) {
                    return decimal(schema, node);
                }
                return ByteBuffer.wrap(HEX.parseHex(text(schema, node)));
            case FIXED: {
                if ("decimal".equals(logical)) {
                    return decimal(schema, node);
                }
                if ("uuid".equals(logical)) {
                    return UUID.fromString(text(schema, node));
                }
                byte[] bytes = HEX.parseHex(text(schema, node));
                if (bytes.length != schema.getFixedSize()) {
                    throw new IllegalArgumentException("fixed " + schema.getFullName() + " takes "
                        + schema.getFixedSize() + " bytes, not " + bytes.length);
                }
                return new GenericData.Fixed(schema, bytes);
            }
            case ENUM: {
                String symbol = text(schema, node);
                if (!schema.hasEnumSymbol(symbol)) {
                    throw new IllegalArgumentException("enum " + schema.getFullName() + " has no symbol " + symbol);
                }
                return new GenericData.EnumSymbol(schema, symbol);
            }
            case RECORD: {
                if (!node.isObject()) {
                    throw mismatch(schema, node);
                }
                GenericData.Record record = new GenericData.Record(schema);
                for (Schema.Field field : schema.getFields()) {
                    JsonNode value = node.get(field.name());
                    if (value != null) {
                        try {
                            record.put(field.pos(), fromJson(field.schema(), value));
                        } catch (RuntimeException e) {
                            throw new IllegalArgumentException("field " + schema.getFullName() + "." + field.name()
                                + ": " + e, e);
                        }
                    } else if (field.hasDefaultValue()) {
                        record.put(field.pos(), MODEL.getDefaultValue(field));
                    } else {
                        throw new IllegalArgumentException("record " + schema.getFullName() + " needs field "
                            + field.name());
                    }
                }
                for (Iterator<String> names = node.fieldNames(); names.hasNext(); ) {
                    String name = names.next();
                    if (schema.getField(name) == null) {
                        throw new IllegalArgumentException("record " + schema.getFullName() + " has no field " + name);
                    }
                }
                return record;
            }
            case ARRAY: {
                if (!node.isArray()) {
                    throw mismatch(schema, node);
                }
                List<Object> items = new ArrayList<>(node.size());
                for (JsonNode item : node) {
                    items.add(fromJson(schema.getElementType(), item));
                }
                return items;
            }
            case MAP: {
                if (!node.isObject()) {
                    throw mismatch(schema, node);
                }
                Map<String, Object> map = new LinkedHashMap<>();
                for (Map.Entry<String, JsonNode> entry : node.properties()) {
                    map.put(entry.getKey(), fromJson(schema.getValueType(), entry.getValue()));
                }
                return map;
            }
            case UNION:
                return unionFromJson(schema, node);
            default:
                throw new IllegalStateException("unknown Avro type " + schema.getType());
        }
    }

    private static Branch unionFromJson(Schema union, JsonNode node) {
        List<Schema> types = union.getTypes();
        if (node.isObject() && node.size() == 2 && node.has("@branch") && node.has("value")) {
            JsonNode index = node.get("@branch");
            if (!index.isIntegralNumber() || index.intValue() < 0 || index.intValue() >= types.size()) {
                throw new IllegalArgumentException("no branch " + index + " in union " + union);
            }
            int i = index.intValue();
            return new Branch(i, fromJson(types.get(i), node.get("value")));
        }
        if (node.isNull()) {
            int i = union.getIndexNamed("null") == null ? -1 : union.getIndexNamed("null");
            if (i < 0) {
                throw new IllegalArgumentException("null given for union without null: " + union);
            }
            return new Branch(i, null);
        }
        List<String> refusals = new ArrayList<>();
        for (int i = 0; i < types.size(); i++) {
            if (types.get(i).getType() == Schema.Type.NULL) {
                continue;
            }
            try {
                return new Branch(i, fromJson(types.get(i), node));
            } catch (RuntimeException e) {
                refusals.add(types.get(i).getName() + ": " + e.getMessage());
            }
        }
        throw new IllegalArgumentException("no branch of union " + union + " takes " + node + " " + refusals);
    }

    // ---------------------------------------------------------------- the operations

    private static Schema parseSchema(String json) {
        return new Schema.Parser().parse(json);
    }

    static ReadResult read(byte[] data) throws IOException {
        try (DataFileReader<Object> reader = new DataFileReader<>(new SeekableByteArrayInput(data), new TaggedReader())) {
            Schema schema = reader.getSchema();
            String codec = reader.getMetaString("avro.codec");
            ObjectNode header = NODES.objectNode();
            header.set("schema", MAPPER.readTree(schema.toString()));
            header.put("codec", codec == null ? "null" : codec);
            List<JsonNode> records = new ArrayList<>();
            while (reader.hasNext()) {
                records.add(toJson(schema, reader.next()));
            }
            return new ReadResult(header, records);
        }
    }

    static List<JsonNode> readBare(Schema schema, byte[] data) throws IOException {
        TaggedReader reader = new TaggedReader(schema);
        BinaryDecoder decoder = DecoderFactory.get().binaryDecoder(data, null);
        List<JsonNode> records = new ArrayList<>();
        while (!decoder.isEnd()) {
            records.add(toJson(schema, reader.read(null, decoder)));
        }
        return records;
    }

    static byte[] write(Schema schema, List<JsonNode> records, String codec) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (DataFileWriter<Object> writer = new DataFileWriter<>(new TaggedWriter(schema))) {
            writer.setCodec(CodecFactory.fromString(codec));
            writer.create(schema, out);
            for (int i = 0; i < records.size(); i++) {
                writer.append(datum(schema, records.get(i), i));
            }
        }
        return out.toByteArray();
    }

    static byte[] writeBare(Schema schema, List<JsonNode> records) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        TaggedWriter writer = new TaggedWriter(schema);
        BinaryEncoder encoder = EncoderFactory.get().blockingBinaryEncoder(out, null);
        for (int i = 0; i < records.size(); i++) {
            writer.write(datum(schema, records.get(i), i), encoder);
        }
        encoder.flush();
        return out.toByteArray();
    }

    private static Object datum(Schema schema, JsonNode record, int index) {
        try {
            return fromJson(schema, record);
        } catch (RuntimeException e) {
            throw new IllegalArgumentException("record " + index + ": " + e.getMessage(), e);
        }
    }

    // ---------------------------------------------------------------- command line and serve mode

    private static List<JsonNode> readJsonLines(Path path) throws IOException {
        List<JsonNode> records = new ArrayList<>();
        for (String line : Files.readAllLines(path, StandardCharsets.UTF_8)) {
            if (!line.isBlank()) {
                records.add(MAPPER.readTree(line));
            }
        }
        return records;
    }

    private static void printLine(OutputStream out, JsonNode node) throws IOException {
        out.write(MAPPER.writeValueAsBytes(node));
        out.write('\n');
    }

    /** "Class: message" of the exception and each of its causes. */
    static String describe(Throwable error) {
        StringBuilder text = new StringBuilder(error.toString());
        for (Throwable cause = error.getCause(); cause != null; cause = cause.getCause()) {
            String said = cause.toString();
            if (text.indexOf(said) < 0) {  // Avro often repeats its cause in its own message
                text.append("; caused by: ").append(said);
            }
            if (cause == cause.getCause()) {
                break;
            }
        }
        return text.toString();
    }

    private static String trace(Throwable error) {
        StringWriter text = new StringWriter();
        error.printStackTrace(new PrintWriter(text));
        return text.toString();
    }

    private static JsonNode serveOne(String line) {
        ObjectNode answer = NODES.objectNode();
        try {
            JsonNode command = MAPPER.readTree(line);
            String op = command.path("op").asText();
            switch (op) {
                case "read": {
                    ReadResult result = read(Base64.getDecoder().decode(command.get("data").textValue()));
                    answer.set("header", result.header());
                    answer.set("records", NODES.arrayNode().addAll(result.records()));
                    break;
                }
                case "read-bare": {
                    List<JsonNode> records = readBare(schemaOf(command),
                        Base64.getDecoder().decode(command.get("data").textValue()));
                    answer.set("records", NODES.arrayNode().addAll(records));
                    break;
                }
                case "write":
                case "write-bare": {
                    List<JsonNode> records = new ArrayList<>();
                    command.get("records").forEach(records::add);
                    byte[] data = op.equals("write")
                        ? write(schemaOf(command), records, command.path("codec").asText("null"))
                        : writeBare(schemaOf(command), records);
                    answer.put("data", Base64.getEncoder().encodeToString(data));
                    break;
                }
                case "ping":
                    answer.put("avro", Schema.class.getPackage().getImplementationVersion());
                    break;
                default:
                    throw new IllegalArgumentException("unknown op " + op);
            }
            answer.put("ok", true);
        } catch (Throwable e) {
            answer.removeAll();
            answer.put("ok", false);
            answer.put("error", describe(e));
            answer.put("trace", trace(e));
        }
        return answer;
    }

    private static Schema schemaOf(JsonNode command) {
        JsonNode schema = command.get("schema");
        return parseSchema(schema.isTextual() ? schema.textValue() : schema.toString());
    }

    private static void serve(OutputStream out) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            printLine(out, serveOne(line));
            out.flush();
        }
    }

    private static void usage() {
        System.err.println("usage: AvroTool read FILE | read-bare SCHEMA_FILE FILE"
            + " | write SCHEMA_FILE RECORDS_JSONL OUT_FILE [CODEC] | write-bare SCHEMA_FILE RECORDS_JSONL OUT_FILE | serve");
        System.exit(2);
    }

    public static void main(String[] args) {
        // stdout carries only the answers: anything else printed on System.out goes to stderr
        OutputStream out = new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16);
        System.setOut(new PrintStream(new FileOutputStream(FileDescriptor.err), true, StandardCharsets.UTF_8));
        if (args.length == 0) {
            usage();
        }
        try {
            switch (args[0]) {
                case "read": {
                    if (args.length != 2) {
                        usage();
                    }
                    ReadResult result = read(Files.readAllBytes(Path.of(args[1])));
                    printLine(out, result.header());
                    for (JsonNode record : result.records()) {
                        printLine(out, record);
                    }
                    break;
                }
                case "read-bare": {
                    if (args.length != 3) {
                        usage();
                    }
                    Schema schema = parseSchema(Files.readString(Path.of(args[1])));
                    for (JsonNode record : readBare(schema, Files.readAllBytes(Path.of(args[2])))) {
                        printLine(out, record);
                    }
                    break;
                }
                case "write": {
                    if (args.length != 4 && args.length != 5) {
                        usage();
                    }
                    Schema schema = parseSchema(Files.readString(Path.of(args[1])));
                    byte[] data = write(schema, readJsonLines(Path.of(args[2])), args.length == 5 ? args[4] : "null");
                    Files.write(Path.of(args[3]), data);
                    break;
                }
                case "write-bare": {
                    if (args.length != 4) {
                        usage();
                    }
                    Schema schema = parseSchema(Files.readString(Path.of(args[1])));
                    Files.write(Path.of(args[3]), writeBare(schema, readJsonLines(Path.of(args[2]))));
                    break;
                }
                case "serve":
                    if (args.length != 1) {
                        usage();
                    }
                    serve(out);
                    break;
                default:
                    usage();
            }
            out.flush();
        } catch (Throwable e) {
            try {
                out.flush();
            } catch (IOException ignored) {
                // stdout gone: the error below is what matters
            }
            System.err.println(describe(e));
            System.err.flush();
            System.exit(1);
        }
        System.exit(0);
    }
}
