package org.pinlater.feeds;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.pinlater.feeds.Cells.deleteColumn;
import static org.pinlater.feeds.Cells.put;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.regionserver.InternalScanner;
import org.apache.hadoop.hbase.regionserver.ScannerContext;
import org.apache.hadoop.hbase.regionserver.Shipper;
import org.junit.Test;

public class TrimmingScannerTest {
  /** A compaction's scanner: fixed batches of cells, one a call. */
  static final class Batches implements InternalScanner, Shipper {
    final List<List<Cell>> batches;
    int shipped;
    boolean closed;

    Batches(List<List<Cell>> batches) {
      this.batches = new ArrayList<>(batches);
    }

    @Override
    public boolean next(List<Cell> result, ScannerContext context) {
      result.addAll(batches.remove(0));
      return !batches.isEmpty();
    }

    @Override
    public void shipped() {
      shipped++;
    }

    @Override
    public void close() {
      closed = true;
    }
  }

  private static List<String> drain(InternalScanner scanner) throws IOException {
    List<String> out = new ArrayList<>();
    List<Cell> cells = new ArrayList<>();
    boolean more;
    do {
      more = scanner.next(cells, null);
      out.addAll(cells.stream().map(Cells::describe).collect(Collectors.toList()));
      cells.clear();
    } while (more);
    return out;
  }

  @Test
  public void aRowSplitAcrossCallsIsCountedAsOneRow() throws IOException {
    Batches source = new Batches(Arrays.asList(
        Arrays.asList(put("r1", "feed", "a", 2), put("r1", "feed", "a", 1)),
        Arrays.asList(put("r1", "feed", "b", 1), put("r1", "feed", "c", 1)),
        Arrays.asList(deleteColumn("r1", "feed", "d", 9), put("r1", "feed", "e", 1), put("r2", "feed", "a", 1)),
        Arrays.asList(put("r2", "feed", "b", 1), put("r2", "feed", "c", 1))));
    long[] reported = new long[2];
    TrimmingScanner scanner = new TrimmingScanner(source, new ColumnCap(2), (cells, rows) -> {
      reported[0] = cells;
      reported[1] = rows;
    });
    assertEquals(Arrays.asList("r1/feed:a@2 Put", "r1/feed:a@1 Put", "r1/feed:b@1 Put", "r1/feed:d@9 DeleteColumn",
        "r2/feed:a@1 Put", "r2/feed:b@1 Put"), drain(scanner));
    scanner.close();
    assertTrue(source.closed);
    assertEquals(3, reported[0]);
    assertEquals(2, reported[1]);
  }

  @Test
  public void aBatchLeftEmptyStillSaysWhetherMoreFollows() throws IOException {
    Batches source = new Batches(Arrays.asList(
        Arrays.asList(put("r", "feed", "a", 1)),
        Arrays.asList(put("r", "feed", "b", 1)),
        Arrays.asList(put("s", "feed", "a", 1))));
    TrimmingScanner scanner = new TrimmingScanner(source, new ColumnCap(1), (cells, rows) -> { });
    List<Cell> cells = new ArrayList<>();
    assertTrue(scanner.next(cells, null));
    assertEquals(1, cells.size());
    cells.clear();
    assertTrue(scanner.next(cells, null));
    assertEquals(0, cells.size());
    assertFalse(scanner.next(cells, null));
    assertEquals(1, cells.size());
  }

  @Test
  public void cellsAlreadyInTheListAreLeftAlone() throws IOException {
    Batches source = new Batches(Arrays.asList(Arrays.asList(put("r", "feed", "b", 1))));
    TrimmingScanner scanner = new TrimmingScanner(source, new ColumnCap(1), (cells, rows) -> { });
    List<Cell> cells = new ArrayList<>(Arrays.asList(put("q", "feed", "z", 1), put("q", "feed", "y", 1)));
    scanner.next(cells, null);
    assertEquals(3, cells.size());
  }

  @Test
  public void shippedReachesTheStoreScanner() throws IOException {
    Batches source = new Batches(Arrays.asList(Arrays.asList(put("r", "feed", "a", 1))));
    TrimmingScanner scanner = new TrimmingScanner(source, new ColumnCap(1), (cells, rows) -> { });
    scanner.shipped();
    scanner.shipped();
    assertEquals(2, source.shipped);
  }
}
