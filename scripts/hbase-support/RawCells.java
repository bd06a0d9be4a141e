// Every cell of one row as stored, delete markers included (a raw scan, which
// neither Thrift server offers): tests check that trimming wrote no marker.
// Run by `scripts/hbase raw`, with the resolved classpath.
//
//   java -cp CP RawCells ZK_PORT TABLE ROW
//
// Prints one line per cell, in the store's order: TYPE FAMILY:QUALIFIER TIMESTAMP.
// Exit 0, or 1 on an error (one line on stderr).
import java.nio.charset.StandardCharsets;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.Table;

public class RawCells {
  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: RawCells ZK_PORT TABLE ROW");
      System.exit(2);
    }
    Configuration conf = HBaseConfiguration.create();
    conf.set("hbase.zookeeper.quorum", "localhost");
    conf.set("hbase.zookeeper.property.clientPort", args[0]);
    byte[] row = args[2].getBytes(StandardCharsets.UTF_8);
    Scan scan = new Scan().withStartRow(row).withStopRow(row, true).setRaw(true).readAllVersions();
    StringBuilder out = new StringBuilder();
    try (Connection connection = ConnectionFactory.createConnection(conf);
        Table table = connection.getTable(TableName.valueOf(args[1]));
        ResultScanner scanner = table.getScanner(scan)) {
      for (Result result : scanner) {
        for (Cell cell : result.rawCells()) {
          out.append(cell.getType()).append(' ')
              .append(new String(CellUtil.cloneFamily(cell), StandardCharsets.UTF_8)).append(':')
              .append(new String(CellUtil.cloneQualifier(cell), StandardCharsets.UTF_8)).append(' ')
              .append(cell.getTimestamp()).append('\n');
        }
      }
    } catch (Exception e) {
      String message = String.valueOf(e.getMessage()).split("\n", 2)[0];
      System.err.println("raw: " + e.getClass().getSimpleName() + ": " + message);
      System.exit(1);
    }
    System.out.print(out);
  }
}
