package dev.keel.eventreader;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.message.SchemaStore;

/**
 * Every schema in Keel's {@code avro/} folder: a {@link SchemaStore} that finds a writer
 * schema by its fingerprint, and the newest version of each named type (the reader schema).
 *
 * <p>As strict as {@code orchestrator/payload_schemas/codec.py}: a file must be named {@code
 * <fullname>.v<N>.avsc} and define that type, and no two versions of a type may share a
 * canonical form (one fingerprint would then name two schemas).
 */
final class Schemas {
  private static final Pattern FILE =
      Pattern.compile("^([A-Za-z_][A-Za-z0-9_.]*)\\.v([1-9][0-9]*)\\.avsc$");

  /** Every version of every type, by the CRC-64-AVRO fingerprint of its canonical form. */
  final SchemaStore.Cache store = new SchemaStore.Cache();

  /** Fullname -> version -> schema. */
  private final Map<String, TreeMap<Integer, Schema>> versions = new HashMap<>();

  /** Fingerprint -> version of the schema it names (the schema itself: {@link #store}). */
  private final Map<Long, Integer> versionOf = new HashMap<>();

  static Schemas load(Path dir) throws IOException {
    List<Path> files = new ArrayList<>();
    try (Stream<Path> walk = Files.walk(dir)) {
      walk.filter(p -> p.toString().endsWith(".avsc")).sorted().forEach(files::add);
    }
    if (files.isEmpty()) {
      throw new IllegalArgumentException("no *.avsc schema in " + dir);
    }
    Schemas schemas = new Schemas();
    Map<Long, String> seen = new HashMap<>();
    for (Path path : files) {
      Matcher m = FILE.matcher(path.getFileName().toString());
      if (!m.matches()) {
        throw new IllegalArgumentException(path + " is not named <fullname>.v<N>.avsc");
      }
      // One parser per file: each file is self-contained and redefines the payload records.
      Schema schema = new Schema.Parser().parse(path.toFile());
      if (!schema.getFullName().equals(m.group(1))) {
        throw new IllegalArgumentException(path + " does not define the named type " + m.group(1));
      }
      long fingerprint = SchemaNormalization.parsingFingerprint64(schema);
      String previous = seen.putIfAbsent(fingerprint, path.getFileName().toString());
      if (previous != null) {
        throw new IllegalArgumentException(path + " has the same canonical form as " + previous);
      }
      Schema other =
          schemas
              .versions
              .computeIfAbsent(m.group(1), k -> new TreeMap<>())
              .put(Integer.parseInt(m.group(2)), schema);
      if (other != null) {
        throw new IllegalArgumentException(path + ": version defined twice");
      }
      schemas.store.addSchema(schema);
      schemas.versionOf.put(fingerprint, Integer.parseInt(m.group(2)));
    }
    return schemas;
  }

  /** The schema with this fingerprint, or null. */
  Schema byFingerprint(long fingerprint) {
    return store.findByFingerprint(fingerprint);
  }

  /** The version of the schema with this fingerprint (0: none). */
  int version(long fingerprint) {
    return versionOf.getOrDefault(fingerprint, 0);
  }

  /** The newest version of {@code fullname}: what every older version is resolved to. */
  Schema newest(String fullname) {
    TreeMap<Integer, Schema> byVersion = versions.get(fullname);
    if (byVersion == null) {
      throw new IllegalArgumentException("no " + fullname + ".v<N>.avsc schema");
    }
    return byVersion.lastEntry().getValue();
  }
}
