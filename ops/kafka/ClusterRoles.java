import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.TransactionDescription;

/**
 * Who holds which role in a Kafka cluster, through the Admin API, as one JSON line.
 *
 * <p>The Python client has no DescribeTransactions or DescribeQuorum; this file runs with the
 * broker's own jars as a single-file program ({@code java -cp 'kafka-libs/*' ClusterRoles.java
 * BOOTSTRAP [--transactional-id ID]... }) and prints {@code {"controller": N, "voters": [..],
 * "transactions": {"ID": {"coordinator": N, "state": "Ongoing"}}}}; a role that cannot be
 * read within the timeout is {@code null}.
 */
public final class ClusterRoles {
  private static final long TIMEOUT_MS = 15_000;

  public static void main(String[] args) throws Exception {
    if (args.length < 1) {
      System.err.println("usage: ClusterRoles BOOTSTRAP [--transactional-id ID]...");
      System.exit(2);
    }
    List<String> transactionalIds = new ArrayList<>();
    for (int i = 1; i < args.length; i += 2) {
      if (!args[i].equals("--transactional-id") || i + 1 >= args.length) {
        System.err.println("unknown or incomplete argument: " + args[i]);
        System.exit(2);
      }
      transactionalIds.add(args[i + 1]);
    }
    Properties props = new Properties();
    props.put("bootstrap.servers", args[0]);
    props.put("request.timeout.ms", "10000");
    props.put("default.api.timeout.ms", String.valueOf(TIMEOUT_MS));
    StringBuilder out = new StringBuilder("{");
    try (Admin admin = Admin.create(props)) {
      String controller = "null";
      String voters = "null";
      try {
        QuorumInfo quorum =
            admin.describeMetadataQuorum().quorumInfo().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
        controller = String.valueOf(quorum.leaderId());
        List<String> ids = new ArrayList<>();
        for (QuorumInfo.ReplicaState voter : quorum.voters()) {
          ids.add(String.valueOf(voter.replicaId()));
        }
        voters = "[" + String.join(",", ids) + "]";
      } catch (Exception e) {
        // left null: the quorum did not answer in time
      }
      out.append("\"controller\":").append(controller).append(",\"voters\":").append(voters);
      out.append(",\"transactions\":{");
      for (int i = 0; i < transactionalIds.size(); i++) {
        String id = transactionalIds.get(i);
        String role = "null";
        try {
          TransactionDescription d =
              admin
                  .describeTransactions(List.of(id))
                  .description(id)
                  .get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
          role = "{\"coordinator\":" + d.coordinatorId() + ",\"state\":\"" + d.state() + "\"}";
        } catch (Exception e) {
          // left null: unknown id or no coordinator in time
        }
        out.append(i == 0 ? "" : ",").append(quote(id)).append(':').append(role);
      }
      out.append("}}");
    }
    System.out.println(out);
  }

  private static String quote(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }
}
