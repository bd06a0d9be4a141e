// Readiness probe for the local HBase clusters (run by scripts/hbase with the
// resolved classpath, as a single-file source program).
//
//   java -cp CP Ready.java DEADLINE_SECONDS NAME=PORT[,THRIFT2_PORT][:PID,PID...] ...
//
// A cluster is ready when its Thrift1 server lists the tables and a trial
// table can be created, disabled and deleted: the Thrift port opens seconds
// before the master can serve, and calls block inside the Thrift server until
// it can. With a Thrift2 port, that port must answer as a Thrift2 server
// (getThriftServerType() == TWO: a Thrift1 server answers ONE) and see the
// trial table, which proves it reaches the cluster too. Polls every cluster until all are ready or the deadline passes
// (0 = one attempt each), or until one of a cluster's PIDs (its JVMs) dies.
// Prints one line per cluster; exit 0 when all are ready, 1 otherwise (with
// each cluster's last error).
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.hbase.thrift.generated.ColumnDescriptor;
import org.apache.hadoop.hbase.thrift.generated.Hbase;
import org.apache.hadoop.hbase.thrift2.generated.THBaseService;
import org.apache.hadoop.hbase.thrift2.generated.TThriftServerType;
import org.apache.hadoop.hbase.thrift2.generated.TTableName;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.TConfiguration;
import org.apache.thrift.transport.TSocket;

public class Ready {
  static final String TRIAL_PREFIX = "pinlater_ready_";
  static final int CALL_TIMEOUT_MS = 20_000;

  static ByteBuffer bytes(String s) {
    return ByteBuffer.wrap(s.getBytes(StandardCharsets.UTF_8));
  }

  static void drop(Hbase.Client client, ByteBuffer table) throws Exception {
    if (client.isTableEnabled(table)) {
      client.disableTable(table);
    }
    client.deleteTable(table);
  }

  // The Thrift2 server on port2 is one, and sees the table Thrift1 just made.
  static void probeThrift2(int port2, String table) throws Exception {
    TSocket socket = new TSocket(new TConfiguration(), "127.0.0.1", port2, CALL_TIMEOUT_MS);
    socket.open();
    try {
      THBaseService.Client client = new THBaseService.Client(new TBinaryProtocol(socket));
      TThriftServerType type = client.getThriftServerType();
      if (type != TThriftServerType.TWO) {
        throw new IllegalStateException("port " + port2 + " answers as a Thrift " + type + " server, not TWO");
      }
      TTableName name = new TTableName();
      name.setNs(bytes("default"));
      name.setQualifier(bytes(table));
      if (!client.tableExists(name)) {
        throw new IllegalStateException("thrift2 port " + port2 + " does not see table " + table);
      }
    } finally {
      socket.close();
    }
  }

  static void probe(int port, int port2) throws Exception {
    TSocket socket = new TSocket(new TConfiguration(), "127.0.0.1", port, CALL_TIMEOUT_MS);
    socket.open();
    try {
      Hbase.Client client = new Hbase.Client(new TBinaryProtocol(socket));
      // Trial tables left behind by an interrupted probe.
      for (ByteBuffer name : client.getTableNames()) {
        String s = StandardCharsets.UTF_8.decode(name.duplicate()).toString();
        if (s.startsWith(TRIAL_PREFIX)) {
          drop(client, name);
        }
      }
      String name = TRIAL_PREFIX + ProcessHandle.current().pid() + "_" + System.nanoTime();
      ByteBuffer table = bytes(name);
      ColumnDescriptor family = new ColumnDescriptor();
      family.setName(bytes("f:"));
      family.setMaxVersions(1);
      List<ColumnDescriptor> families = new ArrayList<>();
      families.add(family);
      client.createTable(table, families);
      try {
        if (port2 > 0) {
          probeThrift2(port2, name);
        }
      } finally {
        drop(client, table);
      }
    } finally {
      socket.close();
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: Ready DEADLINE_SECONDS NAME=PORT[,THRIFT2_PORT][:PID,...] ...");
      System.exit(2);
    }
    long start = System.nanoTime();
    long deadline = start + Long.parseLong(args[0]) * 1_000_000_000L;
    Map<String, Integer> pending = new LinkedHashMap<>();
    Map<String, Integer> thrift2Ports = new LinkedHashMap<>();
    Map<String, List<Long>> pids = new LinkedHashMap<>();
    for (int i = 1; i < args.length; i++) {
      String[] kv = args[i].split("=", 2);
      String[] portPids = kv[1].split(":", 2);
      String[] ports = portPids[0].split(",", 2);
      pending.put(kv[0], Integer.parseInt(ports[0]));
      thrift2Ports.put(kv[0], ports.length > 1 ? Integer.parseInt(ports[1]) : 0);
      List<Long> list = new ArrayList<>();
      if (portPids.length > 1) {
        for (String pid : portPids[1].split(",")) {
          if (!pid.isEmpty()) {
            list.add(Long.parseLong(pid));
          }
        }
      }
      pids.put(kv[0], list);
    }
    Map<String, String> dead = new LinkedHashMap<>();
    Map<String, String> lastError = new LinkedHashMap<>();
    while (true) {
      for (var it = pending.entrySet().iterator(); it.hasNext(); ) {
        var e = it.next();
        try {
          int port2 = thrift2Ports.get(e.getKey());
          probe(e.getValue(), port2);
          String thrift2 = port2 > 0 ? String.format(", thrift2 127.0.0.1:%d saw it", port2) : "";
          System.out.printf("%s: ready (thrift 127.0.0.1:%d created and dropped a table%s) after %.1fs%n",
              e.getKey(), e.getValue(), thrift2, (System.nanoTime() - start) / 1e9);
          it.remove();
        } catch (Exception ex) {
          for (long pid : pids.get(e.getKey())) {
            if (!ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)) {
              dead.put(e.getKey(), "process " + pid + " exited");
            }
          }
          String msg = ex.getClass().getSimpleName() + ": " + ex.getMessage();
          Throwable cause = ex.getCause();
          if (cause != null) {
            msg += " (" + cause.getClass().getSimpleName() + ": " + cause.getMessage() + ")";
          }
          lastError.put(e.getKey(), msg.replace('\n', ' '));
        }
      }
      if (pending.isEmpty()) {
        System.exit(0);
      }
      if (System.nanoTime() >= deadline || !dead.isEmpty()) {
        break;
      }
      Thread.sleep(500);
    }
    for (String name : pending.keySet()) {
      String why = dead.containsKey(name) ? dead.get(name) + "; " : "";
      System.out.printf("%s: NOT ready on 127.0.0.1:%d: %s%s%n", name, pending.get(name), why, lastError.get(name));
    }
    System.exit(1);
  }
}
