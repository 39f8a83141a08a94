// Package mention finds the mentions (`@<userId>`) that peers insert into
// a document's text and hands each over once, for the peer whose changes
// inserted it, to the notification queue (Config.Report).
//
// A Tracker observes every room of a document hub: the hub makes one
// doc.Observer per room through Config.Observe, which is Tracker.Observe,
// and calls it where the room changes (doc.Observer says where). The
// tracker keeps, for each room, the values of the mention fields (Fields)
// followed in Go from the changes the room's log takes (content.go): no
// automerge is called. A local peer's edits make a burst; once they pause
// for Config.Settle (at most maxWait after the burst began, however long
// the typing goes on) or the peer leaves, what the burst did to the
// mentions in the text is counted, for that peer, and reported. Changes
// from the store or another node insert nothing here: their node reports
// them (room.go).
//
// What a room still owes (bursts, and reports not yet handed over) is its
// journal, stored by the hub in the same transaction as the changes it
// accounts for; a node that dies leaves its journals behind, and the node
// that loads the document next, or sweeps the store (Run, NodeGone),
// takes them over (journal.go). Reports that fail to be handed over stay
// in the journal and are offered again after a backoff; one refused for
// good is dropped (handover.go).
//
// Concurrency: Tracker methods are safe for concurrent use. A room's
// observer methods are called by the hub under the room's locks as
// doc.Observer says; they take the room's own lock (room.mu) after them,
// and read the text only under the room's apply lock (in Applying and
// Applied, or in doc.Room.Hold), never under its main lock. Config.Report is called on
// the tracker's own goroutines with no lock held, one hand-over per room
// at a time; it may block, which holds up only that room's next
// hand-over. Close stops the timers and hands the last reports over; the
// hub closes after it, so that its last flush writes what is left.
package mention
