package dev.keel.eventreader;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Base64;
import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericEnumSymbol;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;

/**
 * One Keel record (Avro single-object encoding: {@code C3 01}, the writer schema's 8-byte
 * fingerprint, the body) to the JSON object {@code keel workflow export} prints for it.
 *
 * <p>The writer schema is found by fingerprint in {@link Schemas#store} and resolved to the
 * newest {@code keel.Envelope}, as {@code orchestrator/payload_schemas/codec.py} does. The payload union's
 * branch becomes an object of its fields; a {@code *_json} field (JSON text) becomes the
 * value it holds, parsed by Jackson ({@code ""}, "none", becomes null).
 *
 * <p>A typed payload (envelope v8+: a {@code *_avro} field, itself single-object encoded
 * with a payload schema from {@code avro/payloads/}) is decoded the same way, by its own
 * fingerprint, resolved to the newest version of its schema, and printed as {@code
 * "typed_payload": {"field", "schema", "version", "value"}} next to the export's fields;
 * the {@code *_avro} field itself is not in the export, so it is not in the line either.
 */
final class EnvelopeDecoder {
  static final String ENVELOPE = "keel.Envelope";

  /** The envelope's fields in the export, in its order; the trace context is not history. */
  private static final String[] FIELDS = {
    "message_id", "workflow_id", "run_id", "seq", "type", "recorded_at",
    "causation_id", "correlation_id",
  };

  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
  private final ObjectMapper json = new ObjectMapper();
  private final Schemas schemas;
  private final BinaryMessageDecoder<GenericRecord> decoder;

  /** A decoder per payload schema name, reading every version of it as the newest. */
  private final Map<String, BinaryMessageDecoder<GenericRecord>> payloadDecoders =
      new HashMap<>();

  EnvelopeDecoder(Schemas schemas) {
    this.schemas = schemas;
    // GenericData without conversions: timestamp-millis stays epoch millis (a long).
    decoder =
        new BinaryMessageDecoder<>(GenericData.get(), schemas.newest(ENVELOPE), schemas.store);
  }

  /** The record as an export line; DecodeException says why it cannot be. */
  ObjectNode decode(byte[] value) throws DecodeException {
    if (value == null) {
      throw new DecodeException("no value");
    }
    ByteArrayInputStream in = new ByteArrayInputStream(value);
    GenericRecord envelope;
    try {
      envelope = decoder.decode(in, null);
    } catch (IOException | RuntimeException e) {
      // BadHeaderException (no C3 01), MissingSchemaException (unknown fingerprint), EOF,
      // and whatever else a corrupt body makes the reader throw (the Python codec too).
      throw new DecodeException(reason(e));
    }
    if (in.available() != 0) {
      throw new DecodeException("corrupt datum: " + in.available() + " trailing bytes");
    }
    GenericRecord payload = (GenericRecord) envelope.get("payload");
    String type = envelope.get("type").toString();
    if (!type.equals(payload.getSchema().getName())) {
      throw new DecodeException(
          "envelope type " + type + " does not match payload " + payload.getSchema().getFullName());
    }
    ObjectNode out = NODES.objectNode();
    for (String name : FIELDS) {
      out.set(name, toJson(name, envelope.get(name), true));
    }
    ObjectNode fields = NODES.objectNode();
    ObjectNode typed = null;
    for (Schema.Field f : payload.getSchema().getFields()) {
      Object field = payload.get(f.pos());
      if (!f.name().endsWith(TYPED_SUFFIX)) {
        fields.set(f.name(), toJson(f.name(), field, true));
      } else if (field != null) {
        String jsonField = f.name().substring(0, f.name().length() - TYPED_SUFFIX.length());
        typed = typedPayload(jsonField + "_json", (ByteBuffer) field);
      }
    }
    out.set("payload", fields);
    if (typed != null) {
      out.set("typed_payload", typed);
    }
    return out;
  }

  /** Suffix of the fields that hold a typed payload ({@code input_avro} types {@code input_json}). */
  private static final String TYPED_SUFFIX = "_avro";

  /** A typed payload: found by its fingerprint, resolved to the newest version of its name. */
  private ObjectNode typedPayload(String field, ByteBuffer buf) throws DecodeException {
    byte[] bytes = new byte[buf.remaining()];
    buf.duplicate().get(bytes);
    if (bytes.length < 10 || bytes[0] != (byte) 0xC3 || bytes[1] != (byte) 0x01) {
      throw new DecodeException(field + ": typed payload is not single-object encoded");
    }
    long fingerprint = ByteBuffer.wrap(bytes, 2, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
    Schema writer = schemas.byFingerprint(fingerprint);
    if (writer == null) {
      throw new DecodeException(
          field + ": unknown payload schema fingerprint " + Long.toHexString(fingerprint));
    }
    BinaryMessageDecoder<GenericRecord> payloadDecoder =
        payloadDecoders.computeIfAbsent(
            writer.getFullName(),
            name -> new BinaryMessageDecoder<>(GenericData.get(), schemas.newest(name), schemas.store));
    ByteArrayInputStream in = new ByteArrayInputStream(bytes);
    GenericRecord value;
    try {
      value = payloadDecoder.decode(in, null);
    } catch (IOException | RuntimeException e) {
      throw new DecodeException(field + ": " + reason(e));
    }
    if (in.available() != 0) {
      throw new DecodeException(field + ": " + in.available() + " trailing bytes");
    }
    ObjectNode out = NODES.objectNode();
    out.put("field", field).put("schema", writer.getFullName());
    out.put("version", schemas.version(fingerprint));
    out.set("value", toJson(field, value, false));
    return out;
  }

  /**
   * An Avro value as JSON; with {@code jsonText}, the field's name says whether a string holds
   * JSON text (an envelope's {@code *_json}; never inside a typed payload).
   */
  private JsonNode toJson(String field, Object value, boolean jsonText) throws DecodeException {
    if (value == null) {
      return NODES.nullNode();
    }
    if (value instanceof CharSequence text) {
      return jsonText && field.endsWith("_json")
          ? parse(field, text.toString())
          : NODES.textNode(text.toString());
    }
    if (value instanceof Integer i) {
      return NODES.numberNode(i);
    }
    if (value instanceof Long l) {
      return NODES.numberNode(l);
    }
    if (value instanceof Boolean b) {
      return NODES.booleanNode(b);
    }
    if (value instanceof Float f) {
      return NODES.numberNode(f);
    }
    if (value instanceof Double d) {
      return NODES.numberNode(d);
    }
    if (value instanceof ByteBuffer buf) {
      byte[] bytes = new byte[buf.remaining()];
      buf.duplicate().get(bytes);
      return bytesNode(bytes);
    }
    if (value instanceof GenericFixed fixed) {
      return bytesNode(fixed.bytes());
    }
    if (value instanceof GenericEnumSymbol<?> symbol) {
      return NODES.textNode(symbol.toString());
    }
    if (value instanceof GenericRecord record) {
      ObjectNode obj = NODES.objectNode();
      for (Schema.Field f : record.getSchema().getFields()) {
        obj.set(f.name(), toJson(f.name(), record.get(f.pos()), jsonText));
      }
      return obj;
    }
    if (value instanceof Collection<?> items) {
      ArrayNode arr = NODES.arrayNode();
      for (Object item : items) {
        arr.add(toJson(field, item, jsonText));
      }
      return arr;
    }
    if (value instanceof Map<?, ?> map) {
      ObjectNode obj = NODES.objectNode();
      for (Map.Entry<?, ?> e : map.entrySet()) {
        obj.set(e.getKey().toString(), toJson(field, e.getValue(), jsonText));
      }
      return obj;
    }
    throw new DecodeException(field + ": no JSON form for " + value.getClass().getName());
  }

  /** {@code Type: message} of the exception and of each cause (Avro wraps an EOF). */
  private static String reason(Throwable e) {
    StringBuilder out = new StringBuilder();
    for (Throwable t = e; t != null; t = t.getCause()) {
      out.append(out.length() == 0 ? "" : "; caused by ").append(t.getClass().getSimpleName());
      out.append(t.getMessage() == null ? "" : ": " + t.getMessage());
    }
    return out.toString();
  }

  /** The export's form of Avro bytes (orchestrator/client/history_io.py). */
  private static JsonNode bytesNode(byte[] bytes) {
    return NODES.objectNode().put("$bytes", Base64.getEncoder().encodeToString(bytes));
  }

  private JsonNode parse(String field, String text) throws DecodeException {
    if (text.isEmpty()) {
      return NODES.nullNode();
    }
    try {
      return json.readTree(text);
    } catch (JsonProcessingException e) {
      throw new DecodeException(field + " is not JSON: " + e.getOriginalMessage());
    }
  }

  static final class DecodeException extends Exception {
    DecodeException(String message) {
      super(message);
    }
  }
}
