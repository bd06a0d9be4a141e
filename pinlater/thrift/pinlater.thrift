/*
 * The PinLater wire interface (its contract tables: docs/thrift-server.md).
 * Transport: framed. Protocol: binary.
 *
 * A client generated from this file (any language, stock Thrift code
 * generation) talks to `pinlater server`. Conventions of this server that
 * the tables leave open, all wire compatible:
 *
 * - RequestContext.requestId on enqueueJobs is an idempotency key: a second
 *   enqueueJobs with the same non-empty requestId on the same queue within
 *   the server's window (10 minutes by default) returns the first call's
 *   descriptors and creates nothing. Other methods ignore requestId, so a
 *   client may retry an enqueue that carries one.
 * - RequestContext.source goes into the claim of every dequeued job; ACKs
 *   and checkpoints apply only with the source that holds the claim (or,
 *   from a client that uses the extensions, only to the exact claim the
 *   dequeue returned: see "Claims" below).
 * - PinLaterJobInfo.claimDescriptor: the source that holds the job's claim
 *   while it is IN_PROGRESS (never the claim's token).
 * - PinLaterJob.runAfterTimestampMillis unset or 0: now (the shard's clock).
 * - PinLaterJob.numAttemptsAllowed 0: the queue retry policy's default.
 * - PinLaterJobAckInfo.retryDelayMillis 0: the queue retry policy's delay.
 * - getJobCount / scanJobs: priority unset or 0 means every priority.
 * - scanJobs never returns bodies (use lookupJobs with includeBody).
 */

namespace py pinlater_wire

const string CONTINUATION_START = "0"
const string CONTINUATION_END = "-1"

enum ErrorCode {
  CONTINUATION_INVALID = 400,
  PASSWORD_INVALID = 403,
  QUEUE_NAME_INVALID = 410,
  QUEUE_NAME_TOO_LONG = 411,
  QUEUE_NOT_FOUND = 413,
  PRIORITY_NOT_SUPPORTED = 416,
  DEQUEUE_RATE_LIMITED = 429,
  ENQUEUE_REJECTED = 430,
  UNKNOWN = 500,
  NO_HEALTHY_SHARDS = 501,
  SHARD_CONNECTION_FAILED = 502,
}

enum PinLaterJobState {
  PENDING = 0,
  IN_PROGRESS = 1,
  SUCCEEDED = 2,
  FAILED = 3,
}

struct RequestContext {
  1: required string source,
  2: string requestId = "",
}

exception PinLaterException {
  1: required ErrorCode errorCode,
  2: required string message,
}

struct PinLaterJob {
  1: required binary body,
  2: byte priority = 1,
  3: optional i64 runAfterTimestampMillis,
  4: i32 numAttemptsAllowed = 2,
  5: string customStatus = "",
}

struct PinLaterEnqueueRequest {
  1: required string queueName,
  2: required list<PinLaterJob> jobs,
}

struct PinLaterEnqueueResponse {
  1: required list<string> jobDescriptors,
}

struct PinLaterJobAckInfo {
  1: required string jobDescriptor,
  2: string appendCustomStatus = "",
  3: i64 retryDelayMillis = 0,
}

struct PinLaterJobAckRequest {
  1: required string queueName,
  2: optional list<PinLaterJobAckInfo> jobsSucceeded,
  3: optional list<PinLaterJobAckInfo> jobsFailed,
}

struct PinLaterDequeueRequest {
  1: required string queueName,
  2: required i32 limit,
  3: optional PinLaterJobAckRequest jobAckRequest,
  4: bool dryRun = false,
  5: double coverage = 1.0,
}

struct PinLaterDequeueMetadata {
  1: optional i32 attemptsAllowed,
  2: optional i32 attemptsRemaining,
}

struct PinLaterDequeueResponse {
  1: optional map<string, binary> jobs,
  2: optional map<string, PinLaterDequeueMetadata> jobMetadata,
}

struct PinLaterCheckpointJobRequest {
  1: required string jobDescriptor,
  2: optional string newBody,
  3: bool moveToPending = false,
  4: optional i64 runAfterTimestampMillis,
  5: optional i32 numOfAttemptsAllowed,
  6: optional string prependCustomStatus,
}

struct PinLaterCheckpointJobsRequest {
  1: required string queueName,
  2: required list<PinLaterCheckpointJobRequest> requests,
}

struct PinLaterLookupJobRequest {
  1: required list<string> jobDescriptors,
  2: bool includeBody = false,
}

struct PinLaterJobInfo {
  1: required string jobDescriptor,
  2: required PinLaterJobState jobState,
  10: required i32 attemptsAllowed,
  3: required i32 attemptsRemaining,
  4: required string customStatus,
  5: required i64 createdAtTimestampMillis,
  6: optional i64 runAfterTimestampMillis,
  7: optional i64 updatedAtTimestampMillis,
  8: optional string claimDescriptor,
  9: optional binary body,
}

struct PinLaterGetJobCountRequest {
  1: required string queueName,
  2: required PinLaterJobState jobState,
  3: optional byte priority,
  4: bool countFutureJobs = false,
  5: optional string bodyRegexToMatch,
}

struct PinLaterScanJobsRequest {
  1: required string queueName,
  2: required PinLaterJobState jobState,
  3: optional byte priority,
  4: bool scanFutureJobs = false,
  5: string continuation = "0",
  6: i32 limit = 100,
  7: optional string bodyRegexToMatch,
}

struct PinLaterScanJobsResponse {
  1: required list<PinLaterJobInfo> scannedJobs,
  2: string continuation = "-1",
}

struct PinLaterRetryFailedJobsRequest {
  1: required string queueName,
  2: byte priority = 1,
  3: i32 attemptsToAllow = 1,
  4: optional i64 runAfterTimestampMillis,
  5: i32 limit = 1000,
}

struct PinLaterDeleteJobsRequest {
  1: required string queueName,
  2: required PinLaterJobState jobState,
  3: byte priority = 1,
  4: optional string bodyRegexToMatch,
  5: i32 limit = 1000,
}

service PinLater {
  void createQueue(1: RequestContext context, 2: string name)
      throws (1: PinLaterException e),

  void deleteQueue(1: RequestContext context, 2: string name, 3: string password)
      throws (1: PinLaterException e),

  PinLaterEnqueueResponse enqueueJobs(1: RequestContext context, 2: PinLaterEnqueueRequest request)
      throws (1: PinLaterException e),

  PinLaterDequeueResponse dequeueJobs(1: RequestContext context, 2: PinLaterDequeueRequest request)
      throws (1: PinLaterException e),

  void ackDequeuedJobs(1: RequestContext context, 2: PinLaterJobAckRequest request)
      throws (1: PinLaterException e),

  void checkpointJobs(1: RequestContext context, 2: PinLaterCheckpointJobsRequest request)
      throws (1: PinLaterException e),

  map<string, PinLaterJobInfo> lookupJobs(1: RequestContext context, 2: PinLaterLookupJobRequest request)
      throws (1: PinLaterException e),

  i32 getJobCount(1: RequestContext context, 2: PinLaterGetJobCountRequest request)
      throws (1: PinLaterException e),

  set<string> getQueueNames(1: RequestContext context)
      throws (1: PinLaterException e),

  PinLaterScanJobsResponse scanJobs(1: RequestContext context, 2: PinLaterScanJobsRequest request)
      throws (1: PinLaterException e),

  i32 retryFailedJobs(1: RequestContext context, 2: PinLaterRetryFailedJobsRequest request)
      throws (1: PinLaterException e),

  i32 deleteJobs(1: RequestContext context, 2: PinLaterDeleteJobsRequest request)
      throws (1: PinLaterException e),
}

/*
 * ===================================================================
 * EXTENSIONS: not part of the published PinLater interface.
 *
 * Everything from here to "END OF EXTENSIONS" is an addition of this
 * server: the structs and methods above are exactly the published ones,
 * so stock clients keep working unchanged. A client generated from this
 * file can call the methods below against this server; a stock PinLater
 * server answers them with TApplicationException UNKNOWN_METHOD (the
 * Python ThriftClient then falls back to the published methods, with a
 * warning). The methods are in service PinLaterExtended, which extends
 * PinLater: on the wire a method is named alone, so one connection serves
 * both, and the PinLater service above stays the published one byte for
 * byte. They give remote clients what the in-process API has:
 *
 * - createQueueWithConfig / getQueueConfig / updateQueueConfig: queue
 *   options (priorities, rate limit, pause, claim timeout, retry policy,
 *   retention) at creation, read back, and changed at run time.
 * - ackDequeuedJobsWithResult / checkpointJobsWithResult: the same
 *   requests as ackDequeuedJobs / checkpointJobs, answered per
 *   descriptor: applied (acked), stale (the caller no longer holds the
 *   claim: nothing changed), or not applied because the job's shard could
 *   not be reached (notApplied: descriptor -> cause; retry only those).
 *   Such a partial outcome is a reply, not a PinLaterException.
 * - Trace context: fields from 100 on in three published structs, which
 *   stock peers skip (PinLaterTracedRequestContext and the two after it).
 * - Claims: the dequeue reply's metadata carries each job's claim, and an
 *   ACK or checkpoint that gives it back applies only while the job runs
 *   under exactly that claim (PinLaterClaimedJobAckInfo and
 *   PinLaterClaimedCheckpointJobRequest, fields from 100 on likewise).
 *
 * Durations are milliseconds. Unset optional fields of a request take the
 * server's defaults (create) or stay as they are (update). Like
 * retryFailedJobs and deleteJobs, none of them takes a password: keep the
 * server on a network of trusted clients.
 * ===================================================================
 */

// A queue's retry policy: the wait before retry n (1 = the first retry).
// kind: "constant" (baseMillis), "linear" (baseMillis * n), "exponential"
// (baseMillis * factor^(n-1)), "linear_then_exponential" (linear for
// linearRetries retries, then exponential), "custom" (delaysMillis[n-1],
// the last one repeating). Every wait is capped at maxDelayMillis.
// retries: how many retries a job gets when its enqueue does not say
// (numAttemptsAllowed 0). Unset fields take the defaults of
// linear_then_exponential: 10 retries (custom: one per delay), 30 s base,
// 5 linear retries, factor 2, at most 6 h.
struct PinLaterRetryPolicy {
  1: optional string kind,
  2: optional i32 retries,
  3: optional i64 baseMillis,
  4: optional i32 linearRetries,
  5: optional double factor,
  6: optional i64 maxDelayMillis,
  7: optional list<i64> delaysMillis,
}

// A queue's config. Replies set every field (maxDequeueRate only when the
// queue has a rate limit). In createQueueWithConfig unset fields (and
// priorities 0) take the server's defaults; paused may only be false there.
struct PinLaterQueueConfig {
  1: required string name,
  2: optional i32 priorities,
  // Jobs per second across every dequeuer together; unset: unlimited.
  // Finite and between 0 and 1e9.
  3: optional double maxDequeueRate,
  4: optional bool paused,
  5: optional i64 claimTimeoutMillis,
  6: optional PinLaterRetryPolicy retryPolicy,
  7: optional i64 succeededRetentionMillis,
  8: optional i64 failedRetentionMillis,
  // At most this many jobs RUNNING at once over every shard and process;
  // unset: no cap. From 1 to 1000000.
  9: optional i32 maxRunning,
  // Jobs per second per fairness key (jobs without a key are not limited);
  // unset: unlimited. Finite, above 0 and up to 1e9.
  10: optional double keyRate,
  // At most this many jobs RUNNING at once per fairness key; unset: no cap.
  // From 1 to 1000000.
  11: optional i32 keyMaxRunning,
  // How long a job's unique key stays held after it SUCCEEDED (unset or
  // 0: it is free once the job ends).
  12: optional i64 uniqueSucceededMillis,
}

// Changes to a queue's config; unset fields stay as they are. The number
// of priorities of an existing queue cannot change.
struct PinLaterQueueConfigUpdate {
  1: required string name,
  // Sets the rate limit; unlimitedRate = true removes it (not both).
  2: optional double maxDequeueRate,
  3: optional bool unlimitedRate,
  4: optional bool paused,
  5: optional i64 claimTimeoutMillis,
  6: optional PinLaterRetryPolicy retryPolicy,
  7: optional i64 succeededRetentionMillis,
  8: optional i64 failedRetentionMillis,
  // Sets the concurrency cap; unlimitedRunning = true removes it (not both).
  9: optional i32 maxRunning,
  10: optional bool unlimitedRunning,
  // Sets the per-key rate; unlimitedKeyRate = true removes it (not both).
  11: optional double keyRate,
  12: optional bool unlimitedKeyRate,
  // Sets the per-key cap; unlimitedKeyRunning = true removes it (not both).
  13: optional i32 keyMaxRunning,
  14: optional bool unlimitedKeyRunning,
  // Sets how long a unique key stays held after its job SUCCEEDED (0: not).
  15: optional i64 uniqueSucceededMillis,
}

// Per descriptor, what an ACK or checkpoint request did.
struct PinLaterAckResult {
  1: list<string> acked,
  2: list<string> stale,
  3: map<string, string> notApplied,
  // Checkpoints: those of stale whose job was cancelled (cancelJobs).
  4: list<string> cancelled,
}

// PinLaterException with which error of its code it is, where the code
// alone does not tell (field 100, which stock peers skip): e.g.
// "EnqueueOutcomeUnknown", a SHARD_CONNECTION_FAILED whose enqueue reached a
// shard that then went silent, so its jobs may be stored (send it again only
// with the same requestId); "InvalidRequest" or "RegexBudgetExceeded" for an
// UNKNOWN. Every method throws it in place of PinLaterException.
exception PinLaterKindedException {
  1: required ErrorCode errorCode,
  2: required string message,
  100: optional string kind,
}

// Trace context (W3C Trace Context) on the published calls. A peer that
// traces reads and writes these three structs in place of the published
// ones named: each has the published struct's fields and adds fields from
// 100 on, which the published interface does not use. A stock peer skips
// a field it does not know, so a stock client works with this server, and
// this client with a stock server; what a stock peer sends has no trace.
// The Python side makes the swap when it loads this file
// (pinlater/thrift/__init__.py).
//
// For RequestContext, in every call: the caller's span.
struct PinLaterTracedRequestContext {
  1: required string source,
  2: string requestId = "",
  100: optional string traceparent,
  101: optional string tracestate,
}

// For PinLaterJob: the trace the job's runs continue, when it has its own
// (the server otherwise stores the span of the enqueue), the job's
// fairness key (unset or "": none; at most 64 bytes of UTF-8): among the
// runnable jobs of a priority, a dequeue serves keys in turn; and its
// unique key (unset or "": none; at most 200 bytes of UTF-8): while a job
// of the queue with that key is PENDING or RUNNING (or SUCCEEDED less than
// the queue's uniqueSucceededMillis ago), this one is not stored, and the
// reply names that job's descriptor in its place.
struct PinLaterTracedJob {
  1: required binary body,
  2: byte priority = 1,
  3: optional i64 runAfterTimestampMillis,
  4: i32 numAttemptsAllowed = 2,
  5: string customStatus = "",
  100: optional string traceparent,
  101: optional string key,
  102: optional string unique,
}

// For PinLaterEnqueueResponse: the indexes (into the request's jobs) of
// the jobs not stored because a job held their unique key; their
// descriptor in jobDescriptors is that job's. Unset: none.
struct PinLaterUniqueEnqueueResponse {
  1: required list<string> jobDescriptors,
  100: optional list<i32> duplicates,
}

// For PinLaterJobInfo: the job's fairness key (unset: none).
struct PinLaterKeyedJobInfo {
  1: required string jobDescriptor,
  2: required PinLaterJobState jobState,
  10: required i32 attemptsAllowed,
  3: required i32 attemptsRemaining,
  4: required string customStatus,
  5: required i64 createdAtTimestampMillis,
  6: optional i64 runAfterTimestampMillis,
  7: optional i64 updatedAtTimestampMillis,
  8: optional string claimDescriptor,
  9: optional binary body,
  100: optional string key,
}

// For PinLaterDequeueMetadata: the trace stored with the job, since when
// it was runnable (the shard's clock), for the time it waited, and the
// claim the job was dequeued under (TOKEN@SOURCE; unset on a dry run), to
// give back in its ACK and checkpoints.
struct PinLaterTracedDequeueMetadata {
  1: optional i32 attemptsAllowed,
  2: optional i32 attemptsRemaining,
  100: optional string traceparent,
  101: optional i64 runAfterTimestampMillis,
  102: optional string claim,
}

// Claims. A run's ACK that comes late (the job timed out and runs again,
// even for the same source) must not settle the next run: for
// PinLaterJobAckInfo and PinLaterCheckpointJobRequest, the claim from the
// dequeue reply's metadata. With it the entry applies only while the job
// runs under exactly that claim, whatever the request's source, and is
// stale otherwise; unset (a stock client) or "": it applies to a claim of
// the request's source, as the published interface says. A claim of
// another form is refused (PinLaterException UNKNOWN, naming the form).
struct PinLaterClaimedJobAckInfo {
  1: required string jobDescriptor,
  2: string appendCustomStatus = "",
  3: i64 retryDelayMillis = 0,
  100: optional string claim,
}

struct PinLaterClaimedCheckpointJobRequest {
  1: required string jobDescriptor,
  2: optional string newBody,
  3: bool moveToPending = false,
  4: optional i64 runAfterTimestampMillis,
  5: optional i32 numOfAttemptsAllowed,
  6: optional string prependCustomStatus,
  100: optional string claim,
}

// Cancel: jobs of one queue end now. PENDING ones never run; RUNNING ones
// end FAILED at once (their worker's next checkpoint is stale, and
// checkpointJobsWithResult says cancelled); both with the custom status
// "[cancelled]", never retried. finished: already SUCCEEDED or FAILED,
// left as they were; unknown: no such job; notApplied: descriptor -> why
// its shard was not reached (retry those).
struct PinLaterCancelJobsRequest {
  1: required string queueName,
  2: required list<string> jobDescriptors,
}

struct PinLaterCancelResult {
  1: list<string> cancelled,
  2: list<string> interrupted,
  3: list<string> finished,
  4: list<string> unknown,
  5: map<string, string> notApplied,
}

// Batches: jobs enqueued under a batch, and a callback job that runs once
// every one of them has ended (SUCCEEDED or FAILED). createBatch stores
// the callback (a job without runAfterTimestampMillis) and answers the
// batch's id ("b" and 24 lowercase hex digits); enqueueJobs with the
// batch's id in PinLaterBatchEnqueueRequest.batch adds jobs to it, before
// sealBatch or from a running job of the batch; sealBatch says its maker
// adds no more. state: "open", "sealed", "complete", "released" (the
// callback is due) or "cancelled". A job deleted before it ended counts as
// failed.
struct PinLaterCreateBatchRequest {
  1: required string queueName,
  2: required PinLaterJob callback,
  3: optional string description,
  // The batch's id, if the caller chose it (to name it in the callback).
  4: optional string batch,
}

struct PinLaterBatchStatus {
  1: required string batch,
  2: required string state,
  3: required i64 total,
  4: required i64 succeeded,
  5: required i64 failed,
  6: required string callback,
  7: optional string description,
  8: optional i64 createdAtTimestampMillis,
  9: optional i64 updatedAtTimestampMillis,
}

// For PinLaterEnqueueRequest: the batch its jobs join (unset: none).
struct PinLaterBatchEnqueueRequest {
  1: required string queueName,
  2: required list<PinLaterJob> jobs,
  100: optional string batch,
}

service PinLaterExtended extends PinLater {
  PinLaterQueueConfig createQueueWithConfig(1: RequestContext context, 2: PinLaterQueueConfig config)
      throws (1: PinLaterException e),

  PinLaterQueueConfig getQueueConfig(1: RequestContext context, 2: string name)
      throws (1: PinLaterException e),

  PinLaterQueueConfig updateQueueConfig(1: RequestContext context, 2: PinLaterQueueConfigUpdate update)
      throws (1: PinLaterException e),

  PinLaterAckResult ackDequeuedJobsWithResult(1: RequestContext context, 2: PinLaterJobAckRequest request)
      throws (1: PinLaterException e),

  PinLaterAckResult checkpointJobsWithResult(1: RequestContext context, 2: PinLaterCheckpointJobsRequest request)
      throws (1: PinLaterException e),

  PinLaterCancelResult cancelJobs(1: RequestContext context, 2: PinLaterCancelJobsRequest request)
      throws (1: PinLaterException e),

  string createBatch(1: RequestContext context, 2: PinLaterCreateBatchRequest request)
      throws (1: PinLaterException e),

  PinLaterBatchStatus sealBatch(1: RequestContext context, 2: string batch)
      throws (1: PinLaterException e),

  PinLaterBatchStatus getBatch(1: RequestContext context, 2: string batch)
      throws (1: PinLaterException e),

  // Cancels every job of the batch that has not ended, and its callback.
  PinLaterCancelResult cancelBatch(1: RequestContext context, 2: string batch)
      throws (1: PinLaterException e),
}

/* END OF EXTENSIONS */
