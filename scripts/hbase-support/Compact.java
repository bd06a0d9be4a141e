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
import java.util.concurrent.TimeUnit;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
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
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(args.length > 2 ? Long.parseLong(args[2]) : 60);
    try (Connection connection = ConnectionFactory.createConnection(conf); Admin admin = connection.getAdmin()) {
      TableName table = TableName.valueOf(args[1]);
      admin.flush(table);
      if (args.length > 3 && args[3].equals("flush")) {
        System.out.println("flushed " + table);
        return;
      }
      admin.majorCompact(table);
      // The request is queued: wait for it to start, then to end.
      Thread.sleep(300);
      while (admin.getCompactionState(table) != CompactionState.NONE) {
        if (System.nanoTime() > deadline) {
          System.err.println("compact: " + table + " still compacting at the deadline");
          System.exit(1);
        }
        Thread.sleep(100);
      }
      System.out.println("compacted " + table);
    } catch (Exception e) {
      String message = String.valueOf(e.getMessage()).split("\n", 2)[0];
      System.err.println("compact: " + e.getClass().getSimpleName() + ": " + message);
      System.exit(1);
    }
  }
}
