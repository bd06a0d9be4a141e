// A distributed cluster's region servers as the cluster sees them, and the
// forgetting of a crashed one. Run by `scripts/hbase rs`, with the resolved
// classpath.
//
//   java -cp CP RegionServers ZK_PORT list
//   java -cp CP RegionServers ZK_PORT forget RS_PORT
//
// list: the region servers registered in ZooKeeper, then every region of every
// table (hbase:meta included) with the server meta says holds it, read from
// meta alone (a paused server is never asked):
//
//   server PORT STARTCODE
//   region PORT TABLE STARTKEY ENDKEY     (keys escaped as Bytes.toStringBinary, "-" for empty)
//
// forget: deletes the ZooKeeper node of the server on RS_PORT, what HBase's
// own launcher does once a region server's process has died, so the master
// starts recovering it at once instead of when its session expires.
// Exit 0, or 1 on an error (one line on stderr).
import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.HRegionLocation;
import org.apache.hadoop.hbase.ServerName;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.RegionLocator;
import org.apache.hadoop.hbase.util.Bytes;
import org.apache.zookeeper.ZooKeeper;

public class RegionServers {
  static final String RS_ZNODE = "/hbase/rs";
  static final int TIMEOUT_MS = 10_000;

  static String key(byte[] k) {
    return k.length == 0 ? "-" : Bytes.toStringBinary(k);
  }

  static ZooKeeper zookeeper(String port) throws Exception {
    ZooKeeper zk = new ZooKeeper("127.0.0.1:" + port, TIMEOUT_MS, event -> {});
    long deadline = System.nanoTime() + TIMEOUT_MS * 1_000_000L;
    while (!zk.getState().isConnected()) {
      if (System.nanoTime() > deadline) {
        zk.close();
        throw new IllegalStateException("ZooKeeper on 127.0.0.1:" + port + " did not answer in " + TIMEOUT_MS + " ms");
      }
      Thread.sleep(20);
    }
    return zk;
  }

  static List<ServerName> registered(ZooKeeper zk) throws Exception {
    List<ServerName> servers = new ArrayList<>();
    for (String child : zk.getChildren(RS_ZNODE, false)) {
      servers.add(ServerName.parseServerName(child));
    }
    servers.sort(null);
    return servers;
  }

  static void list(String port) throws Exception {
    StringBuilder out = new StringBuilder();
    try (ZooKeeper zk = zookeeper(port)) {
      for (ServerName server : registered(zk)) {
        out.append("server ").append(server.getPort()).append(' ').append(server.getStartcode()).append('\n');
      }
    }
    Configuration conf = HBaseConfiguration.create();
    conf.set("hbase.zookeeper.quorum", "127.0.0.1");
    conf.set("hbase.zookeeper.property.clientPort", port);
    conf.setInt("hbase.client.retries.number", 3);
    conf.setInt("hbase.client.operation.timeout", TIMEOUT_MS);
    conf.setInt("hbase.client.meta.operation.timeout", TIMEOUT_MS);
    conf.setInt("hbase.rpc.timeout", TIMEOUT_MS / 2);
    try (Connection connection = ConnectionFactory.createConnection(conf); Admin admin = connection.getAdmin()) {
      List<TableName> tables = new ArrayList<>();
      tables.add(TableName.META_TABLE_NAME);
      for (TableName name : admin.listTableNames()) {
        tables.add(name);
      }
      for (TableName name : tables) {
        try (RegionLocator locator = connection.getRegionLocator(name)) {
          for (HRegionLocation location : locator.getAllRegionLocations()) {
            ServerName server = location.getServerName();
            out.append("region ").append(server == null ? "-" : String.valueOf(server.getPort())).append(' ')
                .append(name.getNameAsString()).append(' ')
                .append(key(location.getRegion().getStartKey())).append(' ')
                .append(key(location.getRegion().getEndKey())).append('\n');
          }
        }
      }
    }
    System.out.print(out);
  }

  static void forget(String port, int rsPort) throws Exception {
    try (ZooKeeper zk = zookeeper(port)) {
      for (ServerName server : registered(zk)) {
        if (server.getPort() == rsPort) {
          zk.delete(RS_ZNODE + "/" + server.getServerName(), -1);
          System.out.println("forgot " + server.getServerName());
          return;
        }
      }
    }
    System.out.println("no region server on port " + rsPort + " is registered");
  }

  public static void main(String[] args) {
    try {
      if (args.length == 2 && args[1].equals("list")) {
        list(args[0]);
      } else if (args.length == 3 && args[1].equals("forget")) {
        forget(args[0], Integer.parseInt(args[2]));
      } else {
        System.err.println("usage: RegionServers ZK_PORT list | forget RS_PORT");
        System.exit(2);
      }
    } catch (Exception e) {
      System.err.println("error: " + e);
      System.exit(1);
    }
  }
}
