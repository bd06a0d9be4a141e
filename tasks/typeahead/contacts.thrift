/*
 * The Contacts Service: the typeahead's contacts index behind a Thrift
 * interface, as Pinterest's engineering blog describes it ("a Thrift
 * server, which we call Contacts Service, exposing interfaces to manage
 * this index"). Framed transport, binary protocol, on the same server kit
 * as the PinLater job service: TLS, client-certificate roles ("reader"
 * may look up, "writer" may update), frame limits and the protections
 * against hostile clients.
 *
 * Sources are named by string: mutual, following, followers, social,
 * address_book, second_degree. Ids are 64-bit user ids (16-bit shard, 10-bit type,
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

// One page of a rename: the renamed user's followers, then followees, are
// read a page at a time; each page names its users to settle and the next page.
struct RenamePage {
  1: required i64 userId,
  // The rename's time (the user's name_at in the app data).
  2: required i64 nameAt,
  // followers, then following.
  3: required string phase,
  // Where the page starts (from the step before); absent: at the first.
  4: optional string cursor,
  // A page's users, to settle; absent: read the page.
  5: optional list<i64> users,
}

struct RenameStep {
  // Index cells written.
  1: required i32 entries,
  // The users of the page just read, to settle next (absent: none).
  2: optional RenamePage usersPage,
  // The next page (absent: the rename is done).
  3: optional RenamePage nextPage,
  // Followers, of a users' page, whose follows count the renamed user: a
  // second_degree chain of each (SecondPage with renamed) recomputes the
  // lists that show the name.
  4: optional list<i64> secondActors,
}

// One page of an account's fix-up: an external account ("email:ann@x.com",
// "social:12345") was linked to a user or unlinked, and the contacts naming
// it in the imports that did are settled a page of importers at a time.
struct AccountPage {
  // kind:name, at most 255 bytes.
  1: required string account,
  // Which link or unlink (1 to 64 letters and digits): one change's pages.
  2: required string change,
  // The importer the page before ended at (both absent: the first page).
  3: optional i64 afterUser,
  4: optional string afterSource,
}

struct AccountStep {
  // Index cells written.
  1: required i32 entries,
  // The next page (absent: the fix-up is done).
  2: optional AccountPage nextPage,
}

// One page of a second_degree recompute: a user followed or unfollowed
// someone at atMs, which changes its own second_degree contacts and its
// followers'. The first page (no cursor, no users) recomputes the user's and
// reads its first page of followers; each page names its users' page.
struct SecondPage {
  1: required i64 userId,
  2: required i64 atMs,
  // The follower the page before ended at ("<sequence>:<user id>").
  3: optional string cursor,
  // A page's followers, to recompute (at most 10,000).
  4: optional list<i64> users,
  // Set when a user that userId follows was renamed (at atMs): the chain
  // recomputes userId's followers' lists only.
  5: optional i64 renamed,
  // Which chain (1 to 64 letters and digits): one follow's pages.
  6: required string change,
}

struct SecondStep {
  // Index cells written.
  1: required i32 entries,
  2: optional SecondPage usersPage,
  // The next page (absent: the chain is done).
  3: optional SecondPage nextPage,
}

/*
 * Updates ("writer"). Each names what changed and settles those places of
 * one cluster's index (primary or standby) from the app data as it is when
 * the call runs, never from the call itself: a call that comes late, twice,
 * or beside others leaves the index as the app data says. UNAVAILABLE
 * (HBase or the app data's MySQL down) means try again later. Each answers
 * the index cells it wrote.
 */
service ContactsService {
  // The owner's best contacts whose names start with the query's tokens.
  LookupResponse lookup(1: LookupRequest request) throws (1: ContactsException e),

  // A follow or unfollow at atMs: the follower's following, the followee's
  // followers, both mutuals.
  i32 followChanged(1: string cluster, 2: i64 follower, 3: i64 followee, 4: i64 atMs)
      throws (1: ContactsException e),

  // The owner's import of an imported source (social, address_book):
  // connected, updated or disconnected.
  i32 sourceChanged(1: string cluster, 2: i64 owner, 3: string source) throws (1: ContactsException e),

  // One page of a rename.
  RenameStep renamePage(1: string cluster, 2: RenamePage page) throws (1: ContactsException e),

  // One page of an account's fix-up after a link or unlink.
  AccountStep accountChanged(1: string cluster, 2: AccountPage page) throws (1: ContactsException e),

  // Every place of these owners (at most 1,000): a backfill page, a repair.
  i32 rebuild(1: string cluster, 2: list<i64> owners) throws (1: ContactsException e),

  // One page of a second_degree recompute after a follow or unfollow.
  SecondStep secondPage(1: string cluster, 2: SecondPage page) throws (1: ContactsException e),

  // The second_degree contacts of these owners (at most 1,000): a
  // backfill page, a repair.
  i32 rebuildSecond(1: string cluster, 2: list<i64> owners) throws (1: ContactsException e),
}
