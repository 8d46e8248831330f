package dev.keel.eventreader;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Reads every committed record of a Keel events topic from the start to its end and prints
 * each as one JSON line: the line {@code keel workflow export} prints for it, with each
 * {@code *_json} field parsed (docs/event-log.md). A record that cannot be decoded prints
 * {@code {"partition", "offset", "error"}}. A summary {@code {"topic", "records",
 * "decoded", "failed"}} goes to stderr last. Exit status: 0 when every record decoded, 1
 * when one did not, 2 for a bad command line or a topic that could not be read to its end.
 *
 * <pre>java -jar keel-event-reader.jar --bootstrap-servers HOST:PORT --topic PREFIX.events
 *     --schemas avro/ [--timeout-s 120]</pre>
 */
public final class Reader {
  private Reader() {}

  public static void main(String[] args) {
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    Map<String, String> opts = options(args);
    try {
      System.exit(read(opts));
    } catch (Exception e) { // the broker, the topic or a schema file: one line, no trace
      System.err.println("error: " + e);
      System.exit(2);
    }
  }

  /** Reads the topic, prints a line per record and the summary; the exit status. */
  private static int read(Map<String, String> opts) throws Exception {
    String topic = opts.get("--topic");
    Duration timeout = Duration.ofSeconds(Long.parseLong(opts.getOrDefault("--timeout-s", "120")));
    EnvelopeDecoder decoder = new EnvelopeDecoder(Schemas.load(Path.of(opts.get("--schemas"))));
    ObjectMapper json = new ObjectMapper();
    PrintWriter out =
        new PrintWriter(
            new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8)));
    long records = 0;
    long failed = 0;
    try (KafkaConsumer<byte[], byte[]> consumer = consumer(opts.get("--bootstrap-servers"))) {
      List<TopicPartition> partitions =
          consumer.partitionsFor(topic, timeout).stream()
              .map(p -> new TopicPartition(topic, p.partition()))
              .toList();
      if (partitions.isEmpty()) {
        throw new IllegalStateException("topic " + topic + " does not exist");
      }
      consumer.assign(partitions);
      consumer.seekToBeginning(partitions);
      // read_committed: the end is the last stable offset; aborted records are skipped.
      Map<TopicPartition, Long> ends = consumer.endOffsets(partitions, timeout);
      long deadline = System.nanoTime() + timeout.toNanos();
      while (!atEnd(consumer, ends)) {
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("did not reach the end of " + topic + " in " + timeout);
        }
        for (ConsumerRecord<byte[], byte[]> rec : consumer.poll(Duration.ofMillis(200))) {
          records++;
          try {
            ObjectNode line = decoder.decode(rec.value());
            out.println(json.writeValueAsString(line));
          } catch (EnvelopeDecoder.DecodeException e) {
            failed++;
            ObjectNode err = json.createObjectNode();
            err.put("partition", rec.partition()).put("offset", rec.offset());
            err.put("error", e.getMessage());
            out.println(json.writeValueAsString(err));
          }
        }
      }
    }
    out.flush();
    ObjectNode summary = json.createObjectNode().put("topic", topic).put("records", records);
    summary.put("decoded", records - failed).put("failed", failed);
    System.err.println(json.writeValueAsString(summary));
    return failed == 0 ? 0 : 1;
  }

  private static boolean atEnd(KafkaConsumer<?, ?> consumer, Map<TopicPartition, Long> ends) {
    for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
      if (consumer.position(e.getKey()) < e.getValue()) {
        return false;
      }
    }
    return true;
  }

  private static KafkaConsumer<byte[], byte[]> consumer(String bootstrap) {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    p.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, false); // a reader creates nothing
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    return new KafkaConsumer<>(p);
  }

  private static Map<String, String> options(String[] args) {
    Map<String, String> opts = new HashMap<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      opts.put(args[i], args[i + 1]);
    }
    for (String required : List.of("--bootstrap-servers", "--topic", "--schemas")) {
      if (!opts.containsKey(required)) {
        System.err.println(
            "usage: keel-event-reader --bootstrap-servers HOST:PORT --topic PREFIX.events"
                + " --schemas DIR [--timeout-s N]");
        System.exit(2);
      }
    }
    return opts;
  }
}
