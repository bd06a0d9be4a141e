// Flush a table's memstores to files, then major-compact it and wait until
// the compaction is over (run by `scripts/hbase compact`, with the resolved
// classpath, as a single-file source program). A major compaction drops the
// delete markers and the cells they mask: tests use it to see what is left.
//
//   java -cp CP Compact.java ZK_PORT TABLE [DEADLINE_SECONDS [flush]]
//
// With "flush", only the flush: the memstores become one more file per store
// (tests lay out a store's files so). Exit 0 when done, 1 on an error or at
// the deadline.
//
//   java -cp CP Compact.java ZK_PORT -
//
// Serves commands from stdin, one connection for all of them (a test that
// compacts often pays the JVM's start once): "flush TABLE" or "major TABLE"
// per line, each answered "ok" or "error: ..." on one line; ends at EOF.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.EnumSet;
import java.util.concurrent.TimeUnit;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.ClusterMetrics.Option;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.RegionMetrics;
import org.apache.hadoop.hbase.ServerName;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.CompactionState;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;

public class Compact {
  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: Compact ZK_PORT TABLE [DEADLINE_SECONDS]");
      System.exit(2);
    }
    Configuration conf = HBaseConfiguration.create();
    conf.set("hbase.zookeeper.quorum", "localhost");
    conf.set("hbase.zookeeper.property.clientPort", args[0]);
    long seconds = args.length > 2 ? Long.parseLong(args[2]) : 60;
    try (Connection connection = ConnectionFactory.createConnection(conf); Admin admin = connection.getAdmin()) {
      if (args[1].equals("-")) {
        serve(admin, seconds);
        return;
      }
      TableName table = TableName.valueOf(args[1]);
      boolean flushOnly = args.length > 3 && args[3].equals("flush");
      if (!run(admin, table, !flushOnly, System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds))) {
        System.err.println("compact: " + table + " still compacting at the deadline");
        System.exit(1);
      }
      System.out.println((flushOnly ? "flushed " : "compacted ") + table);
    } catch (Exception e) {
      System.err.println("compact: " + oneLine(e));
      System.exit(1);
    }
  }

  /** Flush, then (major) compact and wait; false at the deadline. */
  static boolean run(Admin admin, TableName table, boolean major, long deadline) throws Exception {
    admin.flush(table);
    if (!major) {
      return true;
    }
    long requested = System.currentTimeMillis();
    admin.majorCompact(table);
    // The request is queued, and a busy region server may not have started
    // it yet (its state is NONE before as after): done when no compaction
    // runs and every region with files has a major compaction's file made
    // since the request.
    while (admin.getCompactionState(table) != CompactionState.NONE || !compactedSince(admin, table, requested)) {
      if (System.nanoTime() > deadline) {
        return false;
      }
      Thread.sleep(50);
    }
    return true;
  }

  /** Whether every region of the table that has files reports its last major compaction at or after {@code since}. */
  static boolean compactedSince(Admin admin, TableName table, long since) throws Exception {
    for (ServerName server : admin.getClusterMetrics(EnumSet.of(Option.LIVE_SERVERS)).getLiveServerMetrics().keySet()) {
      for (RegionMetrics region : admin.getRegionMetrics(server, table)) {
        if (region.getStoreFileCount() > 0 && region.getLastMajorCompactionTimestamp() < since) {
          return false;
        }
      }
    }
    return true;
  }

  static void serve(Admin admin, long seconds) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      String[] words = line.trim().split(" ");
      String answer;
      if (words.length != 2 || !(words[0].equals("flush") || words[0].equals("major"))) {
        answer = "error: expected 'flush TABLE' or 'major TABLE', got '" + line + "'";
      } else {
        try {
          boolean done = run(admin, TableName.valueOf(words[1]), words[0].equals("major"),
              System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds));
          answer = done ? "ok" : "error: still compacting at the deadline";
        } catch (Exception e) {
          answer = "error: " + oneLine(e);
        }
      }
      System.out.println(answer);
      System.out.flush();
    }
  }

  static String oneLine(Exception e) {
    return e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage()).split("\n", 2)[0];
  }
}
