// Package lastseen keeps when each user was last seen, for presence
// (awareness.LastSeenStore): in an embedded bbolt file of its own beside
// the documents' (Bolt), or in PostgreSQL, shared by a cluster (Postgres).
// Both keep the newest time per user: an older one never overwrites it.
//
// Presence owns this data; the document stores hold none of it. A node
// that kept last-seen times in the documents' bbolt file (before this
// package) has them copied here the first time it opens the new file.
package lastseen
