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
import java.util.Base64;
import java.util.Collection;
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
 * newest {@code keel.Envelope}, as {@code orchestrator/codec.py} does. The payload union's
 * branch becomes an object of its fields; a {@code *_json} field (JSON text) becomes the
 * value it holds, parsed by Jackson ({@code ""}, "none", becomes null).
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
  private final BinaryMessageDecoder<GenericRecord> decoder;

  EnvelopeDecoder(Schemas schemas) {
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
      out.set(name, toJson(name, envelope.get(name)));
    }
    out.set("payload", toJson("payload", payload));
    return out;
  }

  /** An Avro value as JSON; the field's name says whether a string holds JSON text. */
  private JsonNode toJson(String field, Object value) throws DecodeException {
    if (value == null) {
      return NODES.nullNode();
    }
    if (value instanceof CharSequence text) {
      return field.endsWith("_json") ? parse(field, text.toString()) : NODES.textNode(text.toString());
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
        obj.set(f.name(), toJson(f.name(), record.get(f.pos())));
      }
      return obj;
    }
    if (value instanceof Collection<?> items) {
      ArrayNode arr = NODES.arrayNode();
      for (Object item : items) {
        arr.add(toJson(field, item));
      }
      return arr;
    }
    if (value instanceof Map<?, ?> map) {
      ObjectNode obj = NODES.objectNode();
      for (Map.Entry<?, ?> e : map.entrySet()) {
        obj.set(e.getKey().toString(), toJson(field, e.getValue()));
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
