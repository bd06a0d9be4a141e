package org.pinlater.feeds;

import java.nio.charset.StandardCharsets;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;
import org.apache.hadoop.hbase.KeyValue;

/** Cells for the tests: text keys, empty values. */
final class Cells {
  private Cells() {}

  static byte[] b(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  static Cell put(String row, String family, String qualifier, long ts) {
    return new KeyValue(b(row), b(family), b(qualifier), ts, KeyValue.Type.Put, new byte[0]);
  }

  static Cell deleteColumn(String row, String family, String qualifier, long ts) {
    return new KeyValue(b(row), b(family), b(qualifier), ts, KeyValue.Type.DeleteColumn);
  }

  static Cell deleteFamily(String row, String family, long ts) {
    return new KeyValue(b(row), b(family), null, ts, KeyValue.Type.DeleteFamily);
  }

  static String describe(Cell cell) {
    return new String(CellUtil.cloneRow(cell), StandardCharsets.UTF_8) + "/"
        + new String(CellUtil.cloneFamily(cell), StandardCharsets.UTF_8) + ":"
        + new String(CellUtil.cloneQualifier(cell), StandardCharsets.UTF_8) + "@" + cell.getTimestamp() + " "
        + cell.getType();
  }
}
