package org.trialog.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.io.IOException;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.SchemaParser;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericEnumSymbol;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.IndexedRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.SchemaStore;

/**
 * Proves that Trialog's records are plain Avro: Java's own implementation reads the
 * test vectors the Python codec wrote (schemas/vectors/) and must find in them exactly
 * what the manifest says.
 *
 * <p>For every vector it checks the single-object header against Java's own CRC-64-AVRO
 * fingerprint and parsing canonical form of the writer schema, decodes the bytes with
 * Avro's standard {@link BinaryMessageDecoder} (which finds the writer schema by the
 * header's fingerprint in a {@link SchemaStore.Cache}, as any consumer would), and
 * compares the result with the expected JSON field by field. Tensors are also turned
 * back into numbers from their little-endian bytes. Evolution vectors are read with the
 * newer reader schema.
 *
 * <p>Usage: {@code java -jar trialog-interop.jar [VECTORS_DIR [AVSC_DIR]]}; exits 1 on any
 * mismatch, after printing one line per vector and a summary.
 */
public final class CheckVectors {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String FORMAT = "trialog-vectors/1";
  private static final String TENSOR = "trialog.Tensor";
  private static final String OBSERVATION = "trialog.Observation";
  private static final double MAX_REWARD_VALUE = 1e12; // |value| of a reward that counts
  private static final int MAX_PROBLEMS = 12; // per vector: enough to see the pattern

  private final Path dir;
  private final Map<String, Schema> avsc;
  private final SchemaStore.Cache store = new SchemaStore.Cache();
  private final Map<String, JsonNode> vectors = new HashMap<>();
  private final Map<String, Schema> writers = new HashMap<>();
  private final Map<String, String> parseErrors = new HashMap<>();

  private CheckVectors(Path dir, Map<String, Schema> avsc) {
    this.dir = dir;
    this.avsc = avsc;
  }

  public static void main(String[] args) throws IOException {
    Path dir = Path.of(args.length > 0 ? args[0] : "schemas/vectors");
    Path avscDir = args.length > 1 ? Path.of(args[1]) : dir.toAbsolutePath().getParent();
    JsonNode manifest = JSON.readTree(dir.resolve("manifest.json").toFile());
    if (!FORMAT.equals(manifest.path("format").asText())) {
      System.out.println("FAIL  manifest format is " + manifest.path("format") + ", this checker reads " + FORMAT);
      System.exit(1);
    }
    CheckVectors check = new CheckVectors(dir, parseAvscDir(avscDir));
    check.load(manifest.get("vectors"));

    int passed = 0;
    int failed = 0;
    for (JsonNode v : manifest.get("vectors")) {
      List<String> problems = new ArrayList<>();
      try {
        check.check(v, problems);
      } catch (Exception e) { // a crash is a mismatch too, and the other vectors still run
        problems.add("unexpected " + e);
      }
      String name = v.path("name").asText();
      if (problems.isEmpty()) {
        passed++;
        System.out.printf("ok    %-34s %-30s %s%n", name, v.path("schema_name").asText(), v.path("fingerprint").asText());
      } else {
        failed++;
        System.out.printf("FAIL  %s (%s)%n", name, v.path("schema_name").asText());
        problems.stream().limit(MAX_PROBLEMS).forEach(p -> System.out.println("        " + p));
        if (problems.size() > MAX_PROBLEMS) {
          System.out.println("        ... and " + (problems.size() - MAX_PROBLEMS) + " more");
        }
      }
    }
    System.out.printf("interop: %d passed, %d failed%n", passed, failed);
    System.exit(failed == 0 ? 0 : 1);
  }

  /** Trialog's own .avsc files, parsed together (they refer to each other), by full name. */
  private static Map<String, Schema> parseAvscDir(Path avscDir) throws IOException {
    File[] files = avscDir.toFile().listFiles((d, n) -> n.endsWith(".avsc"));
    if (files == null || files.length == 0) {
      throw new IOException("no .avsc files in " + avscDir);
    }
    Arrays.sort(files);
    SchemaParser parser = new SchemaParser();
    for (File f : files) {
      parser.parse(f);
    }
    Map<String, Schema> out = new HashMap<>();
    for (Schema s : parser.getParsedNamedSchemas()) {
      out.put(s.getFullName(), s);
    }
    return out;
  }

  /** Parse every writer schema up front: the store must know all of them, as a registry would. */
  private void load(JsonNode list) {
    for (JsonNode v : list) {
      String name = v.path("name").asText();
      vectors.put(name, v);
      try {
        Schema writer = parse(v.get("schema"));
        writers.put(name, writer);
        store.addSchema(writer);
      } catch (RuntimeException | IOException e) {
        parseErrors.put(name, e.getMessage());
        // Not self-contained? Read it with Trialog's types anyway, so that the other
        // checks (fingerprint, decoding) still say what else is wrong.
        try {
          List<Schema> others = avsc.values().stream()
              .filter(t -> !t.getFullName().equals(v.path("schema_name").asText())).toList();
          Schema writer = new Schema.Parser().addTypes(others).parse(JSON.writeValueAsString(v.get("schema")));
          writers.put(name, writer);
          store.addSchema(writer);
        } catch (RuntimeException | IOException ignored) {
          // reported from parseErrors
        }
      }
    }
  }

  /** Each manifest schema is self-contained, so each gets a parser of its own. */
  private static Schema parse(JsonNode schema) throws IOException {
    return new Schema.Parser().parse(JSON.writeValueAsString(schema));
  }

  private void check(JsonNode v, List<String> out) throws IOException {
    String name = v.path("name").asText();
    byte[] bytes = Files.readAllBytes(dir.resolve(v.path("file").asText()));
    String fingerprint = v.path("fingerprint").asText();

    // 1. The header: C3 01 and the writer's fingerprint, little-endian.
    if (bytes.length < 10 || bytes[0] != (byte) 0xC3 || bytes[1] != (byte) 0x01) {
      out.add("no single-object marker C3 01 at the start of " + v.path("file").asText());
      return;
    }
    String headerFp = hex(Arrays.copyOfRange(bytes, 2, 10));
    if (!headerFp.equals(fingerprint)) {
      out.add("header fingerprint " + headerFp + " but manifest says " + fingerprint);
    }

    // 2. The writer schema as Java sees it: its name, canonical form and fingerprint.
    Schema writer = writers.get(name);
    if (parseErrors.containsKey(name)) {
      out.add("writer schema is not a standalone Avro schema: " + parseErrors.get(name));
      if (writer == null) {
        return;
      }
    }
    boolean evolution = v.has("reader_schema");
    // An evolution vector's writer is an earlier version (schemas/previous/): only its
    // reader must be the current .avsc.
    checkSchema("writer", writer, v.path("schema_name").asText(), fingerprint, v.path("canonical").asText(), !evolution, out);

    Schema reader = writer;
    if (evolution) {
      try {
        reader = parse(v.get("reader_schema"));
      } catch (RuntimeException e) {
        out.add("reader schema does not parse in Java: " + e.getMessage());
        return;
      }
      checkSchema("reader", reader, v.path("reader_schema_name").asText(), v.path("reader_fingerprint").asText(),
          v.path("reader_canonical").asText(), true, out);
    }

    // 3. Decode as a consumer would: Avro's message decoder finds the writer by fingerprint.
    BinaryMessageDecoder<Object> decoder;
    if (evolution) {
      decoder = new BinaryMessageDecoder<>(GenericData.get(), reader);
      decoder.addSchema(writer);
    } else {
      decoder = new BinaryMessageDecoder<>(GenericData.get(), reader, store);
    }
    Object datum;
    try {
      datum = decoder.decode(bytes);
    } catch (RuntimeException e) { // MissingSchemaException, BadHeaderException, AvroRuntimeException
      out.add("Java's BinaryMessageDecoder cannot decode it: " + e);
      return;
    }
    int trailing = trailingBytes(bytes, writer, reader);
    if (trailing != 0) {
      out.add("the body is " + trailing + " bytes longer than the schema reads");
    }

    // 4. The value, field by field.
    compare(reader, datum, v.get("expected"), "$", out);

    // 5. Evolution: fields the writer did not have hold the reader's defaults.
    if (evolution) {
      for (Schema.Field f : reader.getFields()) {
        if (writer.getField(f.name()) == null) {
          Object def = GenericData.get().getDefaultValue(f);
          Object got = ((IndexedRecord) datum).get(f.pos());
          if (!GenericData.get().toString(def).equals(GenericData.get().toString(got))) {
            out.add("$." + f.name() + ": reader default " + GenericData.get().toString(def) + ", decoded "
                + GenericData.get().toString(got));
          }
        }
      }
    }

    // 6. An event carrying a payload: the payload is itself a single-object encoding.
    if (v.has("payload_vector")) {
      checkPayload(datum, v.get("payload_vector").asText(), out);
    }

    // 7. An observation carrying a reward (schema v2) says so in its record's headers, which
    // readers check it by: read here from the decoded body, not from what Python meant.
    if (v.has("kafka") && OBSERVATION.equals(reader.getFullName())) {
      checkCarriedReward((IndexedRecord) datum, v.get("kafka").path("headers"), out);
    }
  }

  /**
   * The rule of docs/protocol.md, "A reward an observation carries": the header {@code reward} is
   * "1" if and only if the body carries a reward, which is never at tick 0 and is a finite number
   * with |v| &lt;= 1e12, as a reward's value.
   */
  private static void checkCarriedReward(IndexedRecord obs, JsonNode headers, List<String> out) {
    Schema.Field field = obs.getSchema().getField("reward");
    Object reward = field == null ? null : obs.get(field.pos());
    JsonNode said = headers.get("reward");
    if (reward == null) {
      if (said != null) {
        out.add("kafka: reward header " + said + " on an observation that carries no reward");
      }
      return;
    }
    if (said == null || !"1".equals(said.asText())) {
      out.add("kafka: an observation carrying a reward needs the header reward=1, has " + said);
    }
    if ((Long) obs.get(obs.getSchema().getField("tick").pos()) < 1) {
      out.add("$.reward: an observation of tick 0 carries no reward");
    }
    double value = (Double) reward;
    if (!(Math.abs(value) <= MAX_REWARD_VALUE)) {
      out.add("$.reward: " + value + " is not a finite number between -1e12 and 1e12");
    }
  }

  private void checkSchema(String role, Schema schema, String name, String fingerprint, String canonical,
      boolean current, List<String> out) {
    if (!schema.getFullName().equals(name)) {
      out.add(role + " schema is named " + schema.getFullName() + ", manifest says " + name);
    }
    String javaFp = hex(littleEndian(SchemaNormalization.parsingFingerprint64(schema)));
    if (!javaFp.equals(fingerprint)) {
      out.add(role + " fingerprint: Java computes " + javaFp + ", the manifest (Python) says " + fingerprint);
    }
    String javaForm = SchemaNormalization.toParsingForm(schema);
    if (!javaForm.equals(canonical)) {
      out.add(role + " parsing canonical form differs " + firstDifference(javaForm, canonical));
    }
    Schema own = current ? avsc.get(name) : null;
    if (own != null && SchemaNormalization.parsingFingerprint64(own) != SchemaNormalization.parsingFingerprint64(schema)) {
      out.add(role + " schema differs from " + name + " as parsed from Trialog's .avsc files (fingerprint "
          + hex(littleEndian(SchemaNormalization.parsingFingerprint64(own))) + ")");
    }
  }

  private void checkPayload(Object datum, String payloadName, List<String> out) throws IOException {
    JsonNode pv = vectors.get(payloadName);
    if (pv == null || !writers.containsKey(payloadName)) {
      out.add("payload vector " + payloadName + " is missing or unreadable");
      return;
    }
    IndexedRecord record = (IndexedRecord) datum;
    Schema.Field field = record.getSchema().getField("payload");
    byte[] payload = field == null ? null : bytes((ByteBuffer) record.get(field.pos()));
    byte[] expected = Files.readAllBytes(dir.resolve(pv.path("file").asText()));
    if (!Arrays.equals(payload, expected)) {
      out.add("$.payload differs from the bytes of " + pv.path("file").asText());
      return;
    }
    Schema payloadSchema = writers.get(payloadName);
    Object inner;
    try {
      inner = new BinaryMessageDecoder<>(GenericData.get(), payloadSchema, store).decode(payload);
    } catch (RuntimeException e) {
      out.add("$.payload: Java's BinaryMessageDecoder cannot decode it: " + e);
      return;
    }
    compare(payloadSchema, inner, pv.get("expected"), "$.payload", out);
  }

  /** Bytes left after reading one datum: a body must be exactly one value. */
  private static int trailingBytes(byte[] bytes, Schema writer, Schema reader) throws IOException {
    BinaryDecoder in = DecoderFactory.get().binaryDecoder(bytes, 10, bytes.length - 10, null);
    new GenericDatumReader<Object>(writer, reader).read(null, in);
    return in.isEnd() ? 0 : in.inputStream().available();
  }

  // --- comparing a decoded datum with the manifest's JSON --------------------------------

  private static void compare(Schema s, Object d, JsonNode e, String path, List<String> out) {
    if (e == null) {
      out.add(path + ": missing from the expected value");
      return;
    }
    switch (s.getType()) {
      case RECORD -> {
        if (!(d instanceof IndexedRecord r)) {
          mismatch(path, e, d, out);
          return;
        }
        Set<String> names = new HashSet<>();
        for (Schema.Field f : s.getFields()) {
          names.add(f.name());
          compare(f.schema(), r.get(f.pos()), e.get(f.name()), path + "." + f.name(), out);
        }
        Set<String> keys = new HashSet<>();
        e.fieldNames().forEachRemaining(keys::add);
        if (TENSOR.equals(s.getFullName())) {
          keys.remove("values");
          compareTensor(r, e, path, out);
        }
        keys.removeAll(names);
        if (!keys.isEmpty()) {
          out.add(path + ": expected has fields the schema lacks: " + keys);
        }
      }
      case ENUM -> {
        if (!(d instanceof GenericEnumSymbol<?> sym && e.isTextual() && sym.toString().equals(e.asText()))) {
          mismatch(path, e, d, out);
        }
      }
      case ARRAY -> {
        if (!(d instanceof Collection<?> c && e.isArray() && c.size() == e.size())) {
          mismatch(path, e, d, out);
          return;
        }
        int i = 0;
        for (Object item : c) {
          compare(s.getElementType(), item, e.get(i), path + "[" + i + "]", out);
          i++;
        }
      }
      case MAP -> {
        if (!(d instanceof Map<?, ?> m && e.isObject())) {
          mismatch(path, e, d, out);
          return;
        }
        Map<String, Object> got = new TreeMap<>(); // keys decode as Utf8: compare as strings
        m.forEach((k, val) -> got.put(k.toString(), val));
        Set<String> keys = new HashSet<>();
        e.fieldNames().forEachRemaining(keys::add);
        if (!keys.equals(got.keySet())) {
          out.add(path + ": map keys " + got.keySet() + ", expected " + keys);
          return;
        }
        for (Map.Entry<String, Object> kv : got.entrySet()) {
          compare(s.getValueType(), kv.getValue(), e.get(kv.getKey()), path + "[" + JSON.valueToTree(kv.getKey()) + "]", out);
        }
      }
      case UNION -> {
        int i;
        try {
          i = GenericData.get().resolveUnion(s, d);
        } catch (RuntimeException ex) {
          out.add(path + ": decoded value fits no branch: " + ex.getMessage());
          return;
        }
        Schema branch = s.getTypes().get(i);
        if (e.isNull()) {
          if (branch.getType() != Schema.Type.NULL) {
            out.add(path + ": expected null, decoded branch " + branch.getFullName() + " " + show(d));
          }
          return;
        }
        if (!e.isObject() || e.size() != 1) {
          out.add(path + ": expected value of a union must be null or {\"<branch>\": value}, got " + e);
          return;
        }
        String want = e.fieldNames().next();
        if (!want.equals(branch.getFullName())) {
          out.add(path + ": decoded branch " + branch.getFullName() + ", expected branch " + want);
          return;
        }
        compare(branch, d, e.get(want), path + "<" + want + ">", out);
      }
      case FIXED -> {
        if (!(d instanceof GenericFixed f && e.isTextual() && Arrays.equals(f.bytes(), base64(e)))) {
          mismatch(path, e, d, out);
        }
      }
      case STRING -> {
        if (!(d instanceof CharSequence cs && e.isTextual() && cs.toString().equals(e.asText()))) {
          mismatch(path, e, d, out);
        }
      }
      case BYTES -> {
        if (!(d instanceof ByteBuffer b && e.isTextual() && Arrays.equals(bytes(b), base64(e)))) {
          mismatch(path, e, d, out);
        }
      }
      case INT -> {
        if (!(d instanceof Integer x && e.isIntegralNumber() && e.canConvertToInt() && x == e.intValue())) {
          mismatch(path, e, d, out);
        }
      }
      case LONG -> {
        if (!(d instanceof Long x && e.isIntegralNumber() && e.canConvertToLong() && x == e.longValue())) {
          mismatch(path, e, d, out);
        }
      }
      case FLOAT -> {
        if (!(d instanceof Float x && sameNumber(x.doubleValue(), e))) { // float -> double is exact
          mismatch(path, e, d, out);
        }
      }
      case DOUBLE -> {
        if (!(d instanceof Double x && sameNumber(x, e))) {
          mismatch(path, e, d, out);
        }
      }
      case BOOLEAN -> {
        if (!(d instanceof Boolean x && e.isBoolean() && x == e.booleanValue())) {
          mismatch(path, e, d, out);
        }
      }
      case NULL -> {
        if (d != null || !e.isNull()) {
          mismatch(path, e, d, out);
        }
      }
      default -> out.add(path + ": unexpected schema type " + s.getType());
    }
  }

  /**
   * A tensor's bytes as numbers: rebuilt here from the little-endian element bytes,
   * independently of Python, and compared with the nested list of the manifest.
   */
  private static void compareTensor(IndexedRecord r, JsonNode e, String path, List<String> out) {
    String dtype = r.get(0).toString();
    @SuppressWarnings("unchecked")
    List<Long> shape = (List<Long>) r.get(1);
    ByteBuffer data = ByteBuffer.wrap(bytes((ByteBuffer) r.get(2))).order(ByteOrder.LITTLE_ENDIAN);
    int size = switch (dtype) {
      case "bool", "int8", "uint8" -> 1;
      case "int16", "uint16", "float16" -> 2;
      case "int32", "uint32", "float32" -> 4;
      case "int64", "uint64", "float64", "complex64" -> 8;
      case "complex128" -> 16;
      default -> -1;
    };
    if (size < 0) {
      out.add(path + ": unknown tensor dtype " + dtype);
      return;
    }
    long count = 1;
    for (long n : shape) {
      count *= n;
    }
    if (data.remaining() != count * size) {
      out.add(path + ": " + dtype + " tensor of shape " + shape + " needs " + count * size + " bytes, has "
          + data.remaining());
      return;
    }
    List<JsonNode> values = new ArrayList<>();
    if (!flatten(e.get("values"), shape, 0, values) || values.size() != count) {
      out.add(path + ".values: not a nested list of shape " + shape);
      return;
    }
    for (int i = 0; i < count; i++) {
      JsonNode want = values.get(i);
      boolean ok = switch (dtype) {
        case "bool" -> {
          byte b = data.get();
          yield (b == 0 || b == 1) && want.isBoolean() && want.booleanValue() == (b == 1);
        }
        case "int8" -> sameInteger(BigInteger.valueOf(data.get()), want);
        case "int16" -> sameInteger(BigInteger.valueOf(data.getShort()), want);
        case "int32" -> sameInteger(BigInteger.valueOf(data.getInt()), want);
        case "int64" -> sameInteger(BigInteger.valueOf(data.getLong()), want);
        case "uint8" -> sameInteger(BigInteger.valueOf(Byte.toUnsignedInt(data.get())), want);
        case "uint16" -> sameInteger(BigInteger.valueOf(Short.toUnsignedInt(data.getShort())), want);
        case "uint32" -> sameInteger(BigInteger.valueOf(Integer.toUnsignedLong(data.getInt())), want);
        case "uint64" -> sameInteger(new BigInteger(Long.toUnsignedString(data.getLong())), want);
        case "float16" -> sameNumber(halfToFloat(data.getShort()), want);
        case "float32" -> sameNumber(data.getFloat(), want);
        case "float64" -> sameNumber(data.getDouble(), want);
        case "complex64" -> want.isArray() && want.size() == 2
            & sameNumber(data.getFloat(), want.get(0)) & sameNumber(data.getFloat(), want.get(1));
        case "complex128" -> want.isArray() && want.size() == 2
            & sameNumber(data.getDouble(), want.get(0)) & sameNumber(data.getDouble(), want.get(1));
        default -> false;
      };
      if (!ok) {
        out.add(path + ".values: element " + i + " of the " + dtype + " bytes differs from " + want);
      }
    }
  }

  /** Leaves of a nested JSON list, checking that its nesting is the tensor's shape. */
  private static boolean flatten(JsonNode node, List<Long> shape, int dim, List<JsonNode> leaves) {
    if (node == null) {
      return false;
    }
    if (dim == shape.size()) {
      leaves.add(node);
      return true;
    }
    if (!node.isArray() || node.size() != shape.get(dim)) {
      return false;
    }
    for (JsonNode child : node) {
      if (!flatten(child, shape, dim + 1, leaves)) {
        return false;
      }
    }
    return true;
  }

  /** IEEE 754 half precision to float (Java 17 has no Float.float16ToFloat). */
  static float halfToFloat(short half) {
    int h = half & 0xffff;
    int sign = (h >>> 15) << 31;
    int exponent = (h >>> 10) & 0x1f;
    int mantissa = h & 0x3ff;
    if (exponent == 0x1f) { // infinity or NaN
      return Float.intBitsToFloat(sign | 0x7f800000 | (mantissa << 13));
    }
    if (exponent == 0) { // zero or subnormal: mantissa * 2^-24, exact in a float
      float v = mantissa * 0x1p-24f;
      return sign != 0 ? -v : v;
    }
    return Float.intBitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  }

  /** Exact comparison, -0.0 apart from 0.0; non-finite values are the strings NaN, Infinity, -Infinity. */
  private static boolean sameNumber(double x, JsonNode e) {
    if (e.isTextual()) {
      return switch (e.asText()) {
        case "NaN" -> Double.isNaN(x);
        case "Infinity" -> x == Double.POSITIVE_INFINITY;
        case "-Infinity" -> x == Double.NEGATIVE_INFINITY;
        default -> false;
      };
    }
    return e.isNumber() && Double.doubleToLongBits(x) == Double.doubleToLongBits(e.doubleValue());
  }

  private static boolean sameInteger(BigInteger x, JsonNode e) {
    return e.isIntegralNumber() && x.equals(e.bigIntegerValue());
  }

  private static void mismatch(String path, JsonNode expected, Object decoded, List<String> out) {
    out.add(path + ": expected " + expected + ", Java decoded " + show(decoded));
  }

  private static String show(Object d) {
    String text = d instanceof ByteBuffer b ? "bytes " + hex(bytes(b)) : GenericData.get().toString(d);
    String type = d == null ? "" : " (" + d.getClass().getSimpleName() + ")";
    return (text.length() > 200 ? text.substring(0, 200) + "..." : text) + type;
  }

  // --- small helpers ---------------------------------------------------------------------

  private static byte[] bytes(ByteBuffer b) {
    if (b == null) {
      return null;
    }
    ByteBuffer dup = b.duplicate();
    byte[] out = new byte[dup.remaining()];
    dup.get(out);
    return out;
  }

  private static byte[] base64(JsonNode e) {
    try {
      return Base64.getDecoder().decode(e.asText());
    } catch (IllegalArgumentException ex) {
      return null;
    }
  }

  private static byte[] littleEndian(long v) {
    return ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(v).array();
  }

  private static String hex(byte[] b) {
    StringBuilder sb = new StringBuilder();
    for (byte x : b) {
      sb.append(String.format("%02x", x));
    }
    return sb.toString();
  }

  private static String firstDifference(String java, String python) {
    int i = 0;
    while (i < java.length() && i < python.length() && java.charAt(i) == python.charAt(i)) {
      i++;
    }
    int from = Math.max(0, i - 40);
    return "at character " + i + ":\n          Java:   ..." + java.substring(from, Math.min(java.length(), i + 60))
        + "\n          Python: ..." + python.substring(from, Math.min(python.length(), i + 60));
  }
}
