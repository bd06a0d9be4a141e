package org.pinlater.feeds;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hbase.regionserver.StoreFile;
import org.junit.Test;

public class FeedTrimObserverTest {
  /** A store file with just a path and a sequence id. */
  private static StoreFile file(String name, long seqId) {
    Path path = new Path("/store/" + name);
    return (StoreFile) Proxy.newProxyInstance(StoreFile.class.getClassLoader(), new Class<?>[] {StoreFile.class},
        (proxy, method, args) -> {
          switch (method.getName()) {
            case "getPath":
              return path;
            case "getMaxSequenceId":
              return seqId;
            case "toString":
              return name;
            default:
              throw new UnsupportedOperationException(method.getName());
          }
        });
  }

  private static List<StoreFile> files(StoreFile... files) {
    return new ArrayList<>(Arrays.asList(files));
  }

  @Test
  public void capIsAWholeNumberFromOne() {
    assertEquals(1000, FeedTrimObserver.capOf("1000"));
    assertEquals(1, FeedTrimObserver.capOf("1"));
    for (String bad : new String[] {null, "", "0", "-5", " 10", "10 ", "1e3", "²", "12345678901234567890", "0x10"}) {
      assertEquals("cap of " + bad, 0, FeedTrimObserver.capOf(bad));
    }
  }

  @Test
  public void aCompactionThatDropsDeletesAlwaysTrims() {
    StoreFile a = file("a", 10);
    StoreFile b = file("b", 20);
    assertTrue(FeedTrimObserver.wholeHistory(true, files(b), files(a, b)));
  }

  @Test
  public void aMinorCompactionTrimsOnlyWhenItReadsTheOldestFiles() {
    StoreFile a = file("a", 10);
    StoreFile b = file("b", 20);
    StoreFile c = file("c", 30);
    StoreFile d = file("d", 40);
    assertTrue(FeedTrimObserver.wholeHistory(false, files(a, b), files(a, b, c, d)));
    assertTrue(FeedTrimObserver.wholeHistory(false, files(a, b, c, d), files(a, b, c, d)));
    assertFalse("an older file is left out", FeedTrimObserver.wholeHistory(false, files(b, c), files(a, b, c, d)));
    assertFalse("a file in the middle is left out", FeedTrimObserver.wholeHistory(false, files(a, c), files(a, b, c)));
    assertFalse(FeedTrimObserver.wholeHistory(false, files(), files(a)));
  }

  @Test
  public void aFileLeftOutWithTheSameSequenceIdCountsAsOlder() {
    StoreFile a = file("a", 10);
    StoreFile twin = file("twin", 10);
    assertFalse(FeedTrimObserver.wholeHistory(false, files(a), files(a, twin)));
  }
}
