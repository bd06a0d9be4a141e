package org.pinlater.feeds;

import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;

/**
 * Decides, cell by cell in the store's order, which cells a compaction keeps:
 * every cell of the first {@code cap} columns of each row and family, counting
 * only columns that have a put among the cells seen (a column whose puts are all
 * masked is not a pin of the feed), and every delete marker. The feed's
 * qualifiers sort newest first, so the first columns are the newest pins.
 *
 * <p>Row, family and qualifier are copied when they change: a compaction's
 * cells may live in blocks released between calls.
 */
public final class ColumnCap {
  private final long cap;
  private byte[] row;
  private byte[] family;
  private byte[] qualifier;
  private long columns;
  private boolean keeping = true;
  private long dropped;
  private long rowsTrimmed;

  public ColumnCap(long cap) {
    if (cap < 1) {
      throw new IllegalArgumentException("cap must be at least 1, got " + cap);
    }
    this.cap = cap;
  }

  /** Whether the compaction writes {@code cell}; cells come in the store's order. */
  public boolean keep(Cell cell) {
    if (row == null || !CellUtil.matchingRows(cell, row) || !CellUtil.matchingFamily(cell, family)) {
      row = CellUtil.cloneRow(cell);
      family = CellUtil.cloneFamily(cell);
      qualifier = null;
      columns = 0;
      keeping = true;
    }
    if (cell.getType() != Cell.Type.Put) {
      return true; // a marker may mask puts in files this compaction does not see
    }
    if (qualifier == null || !CellUtil.matchingQualifier(cell, qualifier)) {
      qualifier = CellUtil.cloneQualifier(cell);
      columns++;
      keeping = columns <= cap;
      if (columns == cap + 1) {
        rowsTrimmed++;
      }
    }
    if (!keeping) {
      dropped++;
    }
    return keeping;
  }

  /** Cells dropped so far. */
  public long dropped() {
    return dropped;
  }

  /** Rows (of one family) that lost at least one column so far. */
  public long rowsTrimmed() {
    return rowsTrimmed;
  }
}
