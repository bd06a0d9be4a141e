package org.pinlater.feeds;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;
import static org.pinlater.feeds.Cells.deleteColumn;
import static org.pinlater.feeds.Cells.deleteFamily;
import static org.pinlater.feeds.Cells.put;

import org.junit.Test;

public class ColumnCapTest {
  @Test
  public void keepsTheFirstCapColumnsOfEachRowWithEveryVersion() {
    ColumnCap cap = new ColumnCap(2);
    assertTrue(cap.keep(put("r1", "feed", "a", 30)));
    assertTrue(cap.keep(put("r1", "feed", "a", 20))); // a second version of a kept column
    assertTrue(cap.keep(put("r1", "feed", "b", 10)));
    assertFalse(cap.keep(put("r1", "feed", "c", 40)));
    assertFalse(cap.keep(put("r1", "feed", "c", 5)));
    assertFalse(cap.keep(put("r1", "feed", "d", 1)));
    // The next row starts again.
    assertTrue(cap.keep(put("r2", "feed", "c", 1)));
    assertTrue(cap.keep(put("r2", "feed", "d", 1)));
    assertFalse(cap.keep(put("r2", "feed", "e", 1)));
    assertEquals(4, cap.dropped());
    assertEquals(2, cap.rowsTrimmed());
  }

  @Test
  public void markersAreKeptAndDoNotCountAsColumns() {
    ColumnCap cap = new ColumnCap(2);
    assertTrue(cap.keep(deleteFamily("r", "feed", 5)));
    assertTrue(cap.keep(deleteColumn("r", "feed", "a", 50))); // column a: masked, no put
    assertTrue(cap.keep(deleteColumn("r", "feed", "b", 50)));
    assertTrue(cap.keep(put("r", "feed", "b", 60))); // put newer than its marker: column 1
    assertTrue(cap.keep(put("r", "feed", "c", 10))); // column 2
    assertTrue(cap.keep(deleteColumn("r", "feed", "d", 70))); // past the cap, kept
    assertFalse(cap.keep(put("r", "feed", "d", 80)));
    assertEquals(1, cap.dropped());
  }

  @Test
  public void eachFamilyOfARowHasItsOwnCount() {
    ColumnCap cap = new ColumnCap(1);
    assertTrue(cap.keep(put("r", "f1", "a", 1)));
    assertFalse(cap.keep(put("r", "f1", "b", 1)));
    assertTrue(cap.keep(put("r", "f2", "a", 1)));
    assertFalse(cap.keep(put("r", "f2", "b", 1)));
  }

  @Test
  public void rowsThatArePrefixesOfEachOtherAreDifferentRows() {
    ColumnCap cap = new ColumnCap(1);
    assertTrue(cap.keep(put("1", "feed", "a", 1)));
    assertTrue(cap.keep(put("10", "feed", "a", 1)));
    assertFalse(cap.keep(put("10", "feed", "b", 1)));
  }

  @Test
  public void refusesACapBelowOne() {
    assertThrows(IllegalArgumentException.class, () -> new ColumnCap(0));
  }
}
