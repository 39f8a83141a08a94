// Package lastseen keeps when each user was last seen, for presence
// (awareness.LastSeenStore): in an embedded bbolt file of its own beside
// the documents' (Bolt), or in PostgreSQL, shared by a cluster (Postgres).
// Both keep the newest time per user: an older one never overwrites it.
//
// Presence owns this data; the document stores hold none of it. A data
// directory whose documents' bbolt file still holds last-seen times has
// them copied here the first time the node opens this file.
package lastseen
