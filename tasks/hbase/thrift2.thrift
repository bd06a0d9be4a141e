// The part of HBase's Thrift2 interface (THBaseService, HBase 2.6.1) that
// tasks/hbase uses, written for thriftpy2. Field ids, types and
// requiredness match the server's own IDL (org/apache/hadoop/hbase/thrift2/
// hbase.thrift in hbase-thrift-2.6.1.jar): they are the wire format, so
// change them only to follow that file. Fields and methods we never send or
// read are left out; the binary protocol skips fields it does not know.

// One cell to write, or one cell read back. `timestamp` set per cell is what
// Thrift1 cannot do (its calls carry one timestamp for every cell).
struct TColumnValue {
  1: required binary family,
  2: required binary qualifier,
  3: required binary value,
  4: optional i64 timestamp,
  5: optional binary tags,
  6: optional byte type
}

// A column (qualifier set) or a whole family (qualifier unset), in a get or a
// delete; deletes read `timestamp` per column.
struct TColumn {
  1: required binary family,
  2: optional binary qualifier,
  3: optional i64 timestamp
}

// The cells of one row of a get, in HBase's order: by column, newest first.
struct TResult {
  1: optional binary row,
  2: required list<TColumnValue> columnValues,
  3: optional bool stale = false,
  4: optional bool partial = false
}

// What a TDelete's columns mean; one kind per TDelete.
enum TDeleteType {
  // Exactly the version at the column's timestamp.
  DELETE_COLUMN = 0,
  // Every version at or before the column's timestamp.
  DELETE_COLUMNS = 1,
  // Every column of the family at or before the timestamp (unused here).
  DELETE_FAMILY = 2,
  // Every column of the family at exactly the timestamp.
  DELETE_FAMILY_VERSION = 3
}

struct TGet {
  1: required binary row,
  2: optional list<TColumn> columns,
  3: optional i64 timestamp,
  4: optional TTimeRange timeRange,
  5: optional i32 maxVersions,
  6: optional binary filterString,
  12: optional i32 storeLimit,
  13: optional i32 storeOffset
}

enum TReadType {
  DEFAULT = 1,
  STREAM = 2,
  PREAD = 3
}

// Versions with minStamp <= timestamp < maxStamp.
struct TTimeRange {
  1: required i64 minStamp,
  2: required i64 maxStamp
}

// A scan of [startRow, stopRow); getScannerResults opens, reads and closes
// it in one call. Fields 9-13 and 16-18 are not needed.
struct TScan {
  1: optional binary startRow,
  2: optional binary stopRow,
  3: optional list<TColumn> columns,
  4: optional i32 caching,
  5: optional i32 maxVersions = 1,
  6: optional TTimeRange timeRange,
  7: optional binary filterString,
  8: optional i32 batchSize,
  14: optional TReadType readType,
  15: optional i32 limit
}

struct TPut {
  1: required binary row,
  2: required list<TColumnValue> columnValues,
  3: optional i64 timestamp
}

struct TDelete {
  1: required binary row,
  2: optional list<TColumn> columns,
  3: optional i64 timestamp,
  // The server refuses a TDelete with columns and no type; always set it.
  4: optional TDeleteType deleteType = TDeleteType.DELETE_COLUMNS
}

enum TBloomFilterType {
  NONE = 0,
  ROW = 1,
  ROWCOL = 2,
  ROWPREFIX_FIXED_LENGTH = 3
}

enum TCompressionAlgorithm {
  LZO = 0,
  GZ = 1,
  NONE = 2,
  SNAPPY = 3,
  LZ4 = 4,
  BZIP2 = 5,
  ZSTD = 6
}

enum TDataBlockEncoding {
  NONE = 0,
  PREFIX = 2,
  DIFF = 3,
  FAST_DIFF = 4,
  ROW_INDEX_V1 = 7
}

enum TKeepDeletedCells {
  FALSE = 0,
  TRUE = 1,
  TTL = 2
}

struct TTableName {
  1: optional binary ns,
  2: required binary qualifier
}

// Every field is here, though we set only some: the server builds a modified
// family from this struct alone (its attributes first, then every field that
// is set, which wins), so a field dropped on the way back would reset that
// setting to HBase's default.
struct TColumnFamilyDescriptor {
  1: required binary name,
  2: optional map<binary, binary> attributes,
  3: optional map<string, string> configuration,
  4: optional i32 blockSize,
  5: optional TBloomFilterType bloomnFilterType,
  6: optional TCompressionAlgorithm compressionType,
  7: optional i16 dfsReplication,
  8: optional TDataBlockEncoding dataBlockEncoding,
  9: optional TKeepDeletedCells keepDeletedCells,
  10: optional i32 maxVersions,
  11: optional i32 minVersions,
  12: optional i32 scope,
  13: optional i32 timeToLive,
  14: optional bool blockCacheEnabled,
  15: optional bool cacheBloomsOnWrite,
  16: optional bool cacheDataOnWrite,
  17: optional bool cacheIndexesOnWrite,
  18: optional bool compressTags,
  19: optional bool evictBlocksOnClose,
  20: optional bool inMemory
}

enum TDurability {
  USE_DEFAULT = 0,
  SKIP_WAL = 1,
  ASYNC_WAL = 2,
  SYNC_WAL = 3,
  FSYNC_WAL = 4
}

// Sent by createTable and read back by getTableDescriptor. Table attributes
// carry what has no field of its own (coprocessors, for one).
struct TTableDescriptor {
  1: required TTableName tableName,
  2: optional list<TColumnFamilyDescriptor> columns,
  3: optional map<binary, binary> attributes,
  4: optional TDurability durability
}

// HBase failed the call (a missing table, a region that stayed offline).
exception TIOError {
  1: optional string message,
  2: optional bool canRetry
}

exception TIllegalArgument {
  1: optional string message
}

// Where a region is served: what getAllRegionLocations answers, read from
// hbase:meta (bench/recovery.py watches regions move to live servers).
struct THRegionInfo {
  1: required i64 regionId
  2: required binary tableName
  3: optional binary startKey
  4: optional binary endKey
  5: optional bool offline
  6: optional bool split
  7: optional i32 replicaId
}

struct TServerName {
  1: required string hostName
  2: optional i32 port
  3: optional i64 startCode
}

struct THRegionLocation {
  1: required TServerName serverName
  2: required THRegionInfo regionInfo
}

enum TThriftServerType {
  ONE = 1,
  TWO = 2
}

service THBaseService {
  TResult get(1: required binary table, 2: required TGet tget) throws (1: TIOError io)

  // One result per get, at the same position (empty when the row has none).
  list<TResult> getMultiple(1: required binary table, 2: required list<TGet> tgets) throws (1: TIOError io)

  // Up to numRows rows of a scan, in one call (no scanner left open).
  list<TResult> getScannerResults(1: required binary table, 2: required TScan tscan, 3: i32 numRows = 1)
    throws (1: TIOError io)

  // Not atomic across rows; every cell carries its own timestamp.
  void putMultiple(1: required binary table, 2: required list<TPut> tputs) throws (1: TIOError io)

  // Answers the deletes it could not apply (none, or it throws).
  list<TDelete> deleteMultiple(1: required binary table, 2: required list<TDelete> tdeletes)
    throws (1: TIOError io)

  bool tableExists(1: TTableName tableName) throws (1: TIOError io)

  // Synchronous: the table's regions are online when it returns.
  void createTable(1: required TTableDescriptor desc, 2: optional list<binary> splitKeys) throws (1: TIOError io)

  TTableDescriptor getTableDescriptor(1: required TTableName table) throws (1: TIOError io)

  void addColumnFamily(1: required TTableName tableName, 2: required TColumnFamilyDescriptor column)
    throws (1: TIOError io)

  void modifyColumnFamily(1: required TTableName tableName, 2: required TColumnFamilyDescriptor column)
    throws (1: TIOError io)

  // Replaces the whole descriptor (families and attributes); regions reopen.
  void modifyTable(1: required TTableDescriptor desc) throws (1: TIOError io)

  list<THRegionLocation> getAllRegionLocations(1: required binary table) throws (1: TIOError io)

  void disableTable(1: required TTableName tableName) throws (1: TIOError io)

  void deleteTable(1: required TTableName tableName) throws (1: TIOError io)

  // ONE from a Thrift1 server, TWO from a Thrift2 one: both answer it.
  TThriftServerType getThriftServerType()
}
