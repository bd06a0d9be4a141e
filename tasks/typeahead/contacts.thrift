/*
 * The Contacts Service: the typeahead's contacts index behind a Thrift
 * interface, as Pinterest's engineering blog describes it ("a Thrift
 * server, which we call Contacts Service, exposing interfaces to manage
 * this index"). Framed transport, binary protocol, on the same server kit
 * as the PinLater job service: TLS, client-certificate roles ("reader"
 * may look up), frame limits and the protections against hostile clients.
 *
 * Sources are named by string: mutual, following, followers, social,
 * address_book. Ids are 64-bit user ids (16-bit shard, 10-bit type,
 * 36-bit local id). Errors are ContactsException with one of the codes
 * below and a one-line message.
 */

namespace java com.pinlaterpy.contacts
namespace py contacts

enum ContactsErrorCode {
  // A bad user id, query, limit or source: fix the request.
  INVALID_REQUEST = 1,
  // Neither HBase cluster answered: try again later.
  UNAVAILABLE = 2,
  // The caller's certificate has no role that allows the call.
  PERMISSION_DENIED = 3,
  // The request holds more than the call allows (refused before decoding).
  TOO_LARGE = 4,
  // A failure of the server; the message says what.
  INTERNAL = 5,
}

exception ContactsException {
  1: required i32 errorCode,
  2: required string message,
}

struct Contact {
  // u:<user id> for a Pinterest user, e:<email> or x:<account> for an
  // imported contact that is not one.
  1: required string key,
  2: required string name,
  // The Pinterest user, when the contact is one (an imported contact whose
  // email or account is linked to a user is that user).
  3: optional i64 userId,
}

struct ContactMatch {
  1: required Contact contact,
  // The best-ranked source the contact was found in.
  2: required string source,
  // Every source it was found in, best first (a tall source such as
  // followers only when the lookup read it).
  3: required list<string> sources,
  // How well the name matches the query (higher is better).
  4: required double score,
}

struct LookupRequest {
  1: required i64 owner,
  // What the user typed: every token must start a distinct name token.
  // At most 256 characters; a blank query finds nothing and reads nothing.
  2: required string query,
  // 1..100; 10 when absent.
  3: optional i32 limit,
  // Only these sources (at least one); every source when absent.
  4: optional list<string> sources,
  // The caller's W3C trace context, continued by the server's span.
  5: optional string traceparent,
  6: optional string tracestate,
}

struct LookupResponse {
  // Best first: by source order, then score, then name; one per person.
  1: required list<ContactMatch> matches,
  // The cluster that answered: primary, standby, or none for a blank query.
  2: required string servedBy,
}

service ContactsService {
  // The owner's best contacts whose names start with the query's tokens.
  LookupResponse lookup(1: LookupRequest request) throws (1: ContactsException e),
}
