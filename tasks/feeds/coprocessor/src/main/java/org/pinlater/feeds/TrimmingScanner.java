package org.pinlater.feeds;

import java.io.IOException;
import java.util.List;
import java.util.function.BiConsumer;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.regionserver.InternalScanner;
import org.apache.hadoop.hbase.regionserver.ScannerContext;
import org.apache.hadoop.hbase.regionserver.Shipper;

/**
 * A compaction's scanner with the cells past each row's cap left out. A row
 * may span several calls (the compaction reads a bounded batch of cells at a
 * time); the cap's state carries over. It forwards {@code shipped()}: the
 * compactor calls it only on a scanner that is a {@link Shipper}, and without
 * it the store scanner would hold every block it read until it closes.
 */
final class TrimmingScanner implements InternalScanner, Shipper {
  private final InternalScanner delegate;
  private final ColumnCap cap;
  private final BiConsumer<Long, Long> onClose;

  /** {@code onClose} gets the cells dropped and the rows trimmed. */
  TrimmingScanner(InternalScanner delegate, ColumnCap cap, BiConsumer<Long, Long> onClose) {
    this.delegate = delegate;
    this.cap = cap;
    this.onClose = onClose;
  }

  @Override
  public boolean next(List<Cell> result, ScannerContext context) throws IOException {
    int from = result.size();
    boolean more = delegate.next(result, context);
    int kept = from;
    for (int i = from; i < result.size(); i++) {
      Cell cell = result.get(i);
      if (cap.keep(cell)) {
        result.set(kept++, cell);
      }
    }
    result.subList(kept, result.size()).clear();
    return more;
  }

  @Override
  public void shipped() throws IOException {
    if (delegate instanceof Shipper) {
      ((Shipper) delegate).shipped();
    }
  }

  @Override
  public void close() throws IOException {
    try {
      delegate.close();
    } finally {
      onClose.accept(cap.dropped(), cap.rowsTrimmed());
    }
  }
}
