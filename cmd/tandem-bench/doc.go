// Command tandem-bench is a load generator that speaks the automerge-repo
// protocol, so it measures Tandem and the stock sync server alike.
//
// Scenarios:
//
//	presence  D documents × P peers, each moving its cursor R times a
//	          second (automerge-repo Presence updates); reports end-to-end
//	          latency of what is delivered, deliveries per second, and
//	          whether every peer's final cursor reached every other peer.
//	          Peers behave as stock clients: each decodes what it receives
//	          and sends every ephemeral back to the server (--pass-on);
//	          --compare-with stock,centrifugo with --centrifugo-bin runs
//	          Centrifugo v6 under the same load.
//	          --churn-rate adds users who come and go beside the load, in
//	          documents of their own (churn.go): what presence history
//	          records under load.
//	typing    T typists at C characters/s and R readers on one document,
//	          syncing with automerge; reports how long a keystroke takes
//	          to reach the readers, the server's CPU, and the clients'
//	          frames, bytes and CPU; --history N types into a document of N
//	          one-character changes. Under --cluster, also the rows and
//	          bytes the nodes inserted into the store's tandem_doc_chunks
//	          per change typed (storewrites.go). --rest-edits N adds a
//	          backend's PATCH edits into the document, N a second on a
//	          fixed schedule, and reports their answers' and arrivals'
//	          latency, each run paired with one without (restedits.go).
//	idle      N connections that join and open one document each, then
//	          sit; reports the server's memory per connection.
//	document  one writer makes N one-character changes (--changes), at most
//	          --batch ahead of what it sent, syncing as automerge-repo does;
//	          reports the server's RSS per change (with its child
//	          processes', if it has any), a fresh reader's first sync, a
//	          find after the server restarted (--compare: the stock
//	          server then keeps documents on disk), and one paste of
//	          --paste-bytes in one change: its time, RSS per character, or
//	          the refusal.
//	history-query
//	          presence history in PostgreSQL (history.go): --intervals
//	          generated over a year in a schema of its own under the
//	          history package's tables and indexes, --history-docs
//	          documents from busy to quiet; reports the load, the table's
//	          and indexes' sizes, and the latency of --queries reads as
//	          the HTTP API makes them (an hour: DocIntervals and Merge; a
//	          day, hourly: and Hourly), for traffic and for the busiest
//	          document, with the EXPLAIN of one. --keep-schema and
//	          --reuse-schema skip generating again.
//	webhooks  --hook-docs documents edited at once, each by a client of
//	          its own that goes on editing, with document.changed
//	          delivered to an endpoint in the tool that checks each
//	          signature and answers after --hook-answer (2 s); beside it
//	          presence rooms and typists at a steady load. It alternates
//	          the node with webhooks and without (--hook-runs each) and
//	          reports the presence and typing p99 of both, and what the
//	          endpoint got: events per document, arrivals a second, the
//	          node's queue over time, drops (webhooks.go).
//
// With --soak it runs the fault soak instead (soak.go): a cluster under
// random disconnects, a node killed with -9, Redis restarted and bad
// input; it fails unless no ghost outlives the bound and no acknowledged
// edit or document is lost, damaged or diverged.
//
// With --server-pid it reads the server's CPU time and RSS from /proc;
// --compare runs the stock server after Tandem with the same clients, and
// --cluster N starts N nodes on a private redis-server and a PostgreSQL
// schema of the run's own (dropped at the end). RESULTS.md, beside
// this file, holds the latest figures and the command for each.
package main
