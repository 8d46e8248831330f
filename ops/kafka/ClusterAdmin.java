import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.UnknownMemberIdException;

/**
 * What the Python admin client cannot do, through the Java Admin API, answered as one JSON line.
 *
 * <p>Runs with the broker's own jars ({@code ops/cluster.py} compiles it once). Three commands:
 *
 * <ul>
 *   <li>{@code roles BOOTSTRAP [--transactional-id ID]...} prints {@code {"controller": N,
 *       "voters": [..], "transactions": {"ID": {"coordinator": N, "state": "Ongoing"}}}}; a role
 *       that cannot be read within the timeout is {@code null} (DescribeQuorum,
 *       DescribeTransactions).
 *   <li>{@code remove-member BOOTSTRAP GROUP INSTANCE_ID} removes a static member from its group
 *       at once instead of after its session timeout, and prints {@code {"removed": true}}, or
 *       {@code {"removed": false}} when the group has no such member (LeaveGroup by instance id).
 *   <li>{@code lead BOOTSTRAP TOPIC PARTITION BROKER} makes BROKER the partition's leader: its
 *       replicas are reordered so BROKER comes first (a reassignment that moves no data), then a
 *       preferred-leader election; prints {@code {"leader": N}}. On {@code __consumer_offsets} or
 *       {@code __transaction_state} this places a group's or a transactional id's coordinator.
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
    } else if (args.length == 5 && args[0].equals("lead")) {
      try (Admin admin = connect(args[1])) {
        int leader = lead(admin, args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]));
        System.out.println("{\"leader\":" + leader + "}");
      }
    } else {
      usage("unknown command");
    }
  }

  private static void usage(String why) {
    System.err.println(
        why
            + "; usage: ClusterAdmin roles BOOTSTRAP [--transactional-id ID]... | "
            + "ClusterAdmin remove-member BOOTSTRAP GROUP INSTANCE_ID | "
            + "ClusterAdmin lead BOOTSTRAP TOPIC PARTITION BROKER");
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

  private static TopicPartitionInfo describe(Admin admin, String topic, int partition)
      throws Exception {
    TopicDescription d =
        admin
            .describeTopics(List.of(topic))
            .allTopicNames()
            .get(TIMEOUT_MS, TimeUnit.MILLISECONDS)
            .get(topic);
    return d.partitions().get(partition);
  }

  private static int lead(Admin admin, String topic, int partition, int broker) throws Exception {
    TopicPartition tp = new TopicPartition(topic, partition);
    List<Integer> order = new ArrayList<>(List.of(broker));
    for (Node replica : describe(admin, topic, partition).replicas()) {
      if (replica.id() != broker) {
        order.add(replica.id());
      }
    }
    if (order.size() != describe(admin, topic, partition).replicas().size()) {
      usage("broker " + broker + " holds no replica of " + tp);
    }
    admin
        .alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(order))))
        .all()
        .get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
    long deadline = System.currentTimeMillis() + TIMEOUT_MS;
    while (System.currentTimeMillis() < deadline) {
      boolean moving =
          !admin
              .listPartitionReassignments(Set.of(tp))
              .reassignments()
              .get(TIMEOUT_MS, TimeUnit.MILLISECONDS)
              .isEmpty();
      if (!moving) {
        try {
          admin
              .electLeaders(ElectionType.PREFERRED, Set.of(tp))
              .partitions()
              .get(TIMEOUT_MS, TimeUnit.MILLISECONDS)
              .get(tp)
              .ifPresent(
                  e -> {
                    if (!(e instanceof ElectionNotNeededException)) {
                      throw new IllegalStateException(e);
                    }
                  });
        } catch (IllegalStateException e) {
          // the new order is not applied yet somewhere: try again below
        }
        int leader = describe(admin, topic, partition).leader().id();
        if (leader == broker) {
          return leader;
        }
      }
      Thread.sleep(100);
    }
    return describe(admin, topic, partition).leader().id();
  }

  private static String quote(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }
}
