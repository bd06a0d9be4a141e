package org.pinlater.feeds;

import java.util.Collection;
import java.util.HashSet;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hbase.CoprocessorEnvironment;
import org.apache.hadoop.hbase.client.TableDescriptor;
import org.apache.hadoop.hbase.coprocessor.ObserverContext;
import org.apache.hadoop.hbase.coprocessor.RegionCoprocessor;
import org.apache.hadoop.hbase.coprocessor.RegionCoprocessorEnvironment;
import org.apache.hadoop.hbase.coprocessor.RegionObserver;
import org.apache.hadoop.hbase.metrics.Gauge;
import org.apache.hadoop.hbase.metrics.MetricRegistry;
import org.apache.hadoop.hbase.regionserver.InternalScanner;
import org.apache.hadoop.hbase.regionserver.ScanType;
import org.apache.hadoop.hbase.regionserver.Store;
import org.apache.hadoop.hbase.regionserver.StoreFile;
import org.apache.hadoop.hbase.regionserver.compactions.CompactionLifeCycleTracker;
import org.apache.hadoop.hbase.regionserver.compactions.CompactionRequest;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Trims the following feed inside HBase's compactions (docs/feeds.md): each row
 * keeps its newest {@code cap} pin columns and the rest are not written to the
 * new file. No delete marker is written and nothing is read on the write path.
 *
 * <p>The cap is the table attribute {@value #CAP_ATTRIBUTE}, read at each
 * compaction, so an operator changes it with an alter of the table; a table
 * without it (or with a value that is not a whole number from 1) is not trimmed.
 *
 * <p>When it trims (docs/feeds.md has the reasoning): a compaction that drops
 * deletes (major, or every file of the store) sees every put and every marker
 * written up to its newest file, as does a minor compaction whose files are the
 * oldest of the store (no file left out is older than one it reads). Either
 * view is the store as of one moment, and trimming it is a trim made at that
 * moment. Any other minor compaction is left alone: a marker in a file it does
 * not read could mask a column it would count, and it would drop a pin that
 * belongs to the newest {@code cap}.
 */
public final class FeedTrimObserver implements RegionCoprocessor, RegionObserver {
  /** The table attribute holding the cap. */
  public static final String CAP_ATTRIBUTE = "pinlater.trim.cap";

  private static final Logger LOG = LoggerFactory.getLogger(FeedTrimObserver.class);

  // Per region server (one class per JVM): HBase makes a registry per
  // coprocessor class and drops it when the last region using it closes, so
  // an alter that reopens the regions would otherwise reset the counts, and
  // JMX, which copies registries every ~10 s, can keep showing the dropped one.
  private static final AtomicLong CELLS_DROPPED = new AtomicLong();
  private static final AtomicLong ROWS_TRIMMED = new AtomicLong();
  private static final AtomicLong COMPACTIONS_TRIMMED = new AtomicLong();
  private static final AtomicLong COMPACTIONS_PASSED = new AtomicLong();

  @Override
  public Optional<RegionObserver> getRegionObserver() {
    return Optional.of(this);
  }

  @Override
  public void start(CoprocessorEnvironment env) {
    if (env instanceof RegionCoprocessorEnvironment) {
      // One registry per region server and coprocessor class: the counts are
      // the region server's, across its regions (JMX: sub=Coprocessor.Region.CP_<class>).
      MetricRegistry metrics = ((RegionCoprocessorEnvironment) env).getMetricRegistryForRegionServer();
      gauge(metrics, "cellsDropped", CELLS_DROPPED);
      gauge(metrics, "rowsTrimmed", ROWS_TRIMMED);
      gauge(metrics, "compactionsTrimmed", COMPACTIONS_TRIMMED);
      gauge(metrics, "compactionsPassed", COMPACTIONS_PASSED);
    }
  }

  @Override
  public InternalScanner preCompact(ObserverContext<RegionCoprocessorEnvironment> c, Store store,
      InternalScanner scanner, ScanType scanType, CompactionLifeCycleTracker tracker, CompactionRequest request) {
    TableDescriptor table = c.getEnvironment().getRegion().getTableDescriptor();
    long cap = capOf(table.getValue(CAP_ATTRIBUTE));
    if (cap < 1) {
      LOG.warn("{}: no valid {} ({}): compaction of {} not trimmed", table.getTableName(), CAP_ATTRIBUTE,
          table.getValue(CAP_ATTRIBUTE), store.getColumnFamilyName());
      return scanner;
    }
    boolean dropsDeletes = scanType == ScanType.COMPACT_DROP_DELETES;
    if (!wholeHistory(dropsDeletes, request.getFiles(), store.getStorefiles())) {
      COMPACTIONS_PASSED.incrementAndGet();
      return scanner;
    }
    COMPACTIONS_TRIMMED.incrementAndGet();
    return new TrimmingScanner(scanner, new ColumnCap(cap), (dropped, rows) -> {
      CELLS_DROPPED.addAndGet(dropped);
      ROWS_TRIMMED.addAndGet(rows);
      if (dropped > 0) {
        LOG.info("{} {}: compaction trimmed {} rows to {} columns, {} cells dropped",
            table.getTableName(), store.getColumnFamilyName(), rows, cap, dropped);
      }
    });
  }

  /** The cap an attribute's text gives: a whole number from 1, else 0 (no trimming). */
  static long capOf(String text) {
    if (text == null || text.isEmpty() || text.length() > 18) {
      return 0;
    }
    for (int i = 0; i < text.length(); i++) {
      char ch = text.charAt(i);
      if (ch < '0' || ch > '9') {
        return 0;
      }
    }
    return Long.parseLong(text);
  }

  /**
   * Whether a compaction of {@code compacted} sees the store as of one moment:
   * it drops deletes, or no file of {@code all} left out of it is older than
   * one it reads (a file's age: the newest edit it holds, its sequence id).
   */
  static boolean wholeHistory(boolean dropsDeletes, Collection<? extends StoreFile> compacted,
      Collection<? extends StoreFile> all) {
    if (dropsDeletes) {
      return true;
    }
    if (compacted.isEmpty()) {
      return false;
    }
    Set<Path> read = new HashSet<>();
    long newest = Long.MIN_VALUE;
    for (StoreFile file : compacted) {
      read.add(file.getPath());
      newest = Math.max(newest, file.getMaxSequenceId());
    }
    for (StoreFile file : all) {
      if (!read.contains(file.getPath()) && file.getMaxSequenceId() <= newest) {
        return false;
      }
    }
    return true;
  }

  private static void gauge(MetricRegistry metrics, String name, AtomicLong value) {
    if (!metrics.get(name).isPresent()) { // a second region's instance shares the registry
      metrics.register(name, (Gauge<Long>) value::get);
    }
  }
}
