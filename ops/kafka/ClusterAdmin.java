import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.common.errors.UnknownMemberIdException;

/**
 * What the Python admin client cannot do, through the Java Admin API, answered as one JSON line.
 *
 * <p>Runs with the broker's own jars ({@code ops/cluster.py} compiles it once). Two commands:
 *
 * <ul>
 *   <li>{@code roles BOOTSTRAP [--transactional-id ID]...} prints {@code {"controller": N,
 *       "voters": [..], "transactions": {"ID": {"coordinator": N, "state": "Ongoing"}}}}; a role
 *       that cannot be read within the timeout is {@code null} (DescribeQuorum,
 *       DescribeTransactions).
 *   <li>{@code remove-member BOOTSTRAP GROUP INSTANCE_ID} removes a static member from its group
 *       at once instead of after its session timeout, and prints {@code {"removed": true}}, or
 *       {@code {"removed": false}} when the group has no such member (LeaveGroup by instance id).
 * </ul>
 */
public final class ClusterAdmin {
  private static final long TIMEOUT_MS = 15_000;

  public static void main(String[] args) throws Exception {
    if (args.length >= 2 && args[0].equals("roles")) {
      List<String> transactionalIds = new ArrayList<>();
      for (int i = 2; i < args.length; i += 2) {
        if (!args[i].equals("--transactional-id") || i + 1 >= args.length) {
          usage("unknown or incomplete argument: " + args[i]);
        }
        transactionalIds.add(args[i + 1]);
      }
      try (Admin admin = connect(args[1])) {
        System.out.println(roles(admin, transactionalIds));
      }
    } else if (args.length == 4 && args[0].equals("remove-member")) {
      try (Admin admin = connect(args[1])) {
        System.out.println("{\"removed\":" + removeMember(admin, args[2], args[3]) + "}");
      }
    } else {
      usage("unknown command");
    }
  }

  private static void usage(String why) {
    System.err.println(
        why
            + "; usage: ClusterAdmin roles BOOTSTRAP [--transactional-id ID]... | "
            + "ClusterAdmin remove-member BOOTSTRAP GROUP INSTANCE_ID");
    System.exit(2);
  }

  private static Admin connect(String bootstrap) {
    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrap);
    props.put("request.timeout.ms", "10000");
    props.put("default.api.timeout.ms", String.valueOf(TIMEOUT_MS));
    return Admin.create(props);
  }

  private static String roles(Admin admin, List<String> transactionalIds) {
    StringBuilder out = new StringBuilder("{");
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
    return out.append("}}").toString();
  }

  private static boolean removeMember(Admin admin, String group, String instanceId)
      throws Exception {
    RemoveMembersFromConsumerGroupOptions options =
        new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove(instanceId)));
    try {
      admin
          .removeMembersFromConsumerGroup(group, options)
          .all()
          .get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
      return true;
    } catch (ExecutionException e) {
      if (e.getCause() instanceof UnknownMemberIdException) {
        return false; // not (or no longer) a member: nothing to remove
      }
      throw e;
    }
  }

  private static String quote(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }
}
