// The stock automerge-repo sync server, for side-by-side runs of
// tandem-bench: a Repo with the stock WebSocketServerAdapter, as users of
// automerge-repo run it. Usage: node server.mjs <port> [dir]. With dir it
// keeps documents in that directory through the stock NodeFSStorageAdapter
// (as automerge-repo's sync server does), so a restart on the same dir
// loads them again; without it, in memory. It prints "listening <port>"
// once it serves connections, and on SIGINT or SIGTERM writes what its
// storage has not yet written before it exits.
import { WebSocketServer } from "ws"
import { Repo } from "@automerge/automerge-repo"
import { WebSocketServerAdapter } from "@automerge/automerge-repo-network-websocket"
import { NodeFSStorageAdapter } from "@automerge/automerge-repo-storage-nodefs"

const port = Number(process.argv[2] ?? 0)
const dir = process.argv[3]
const wss = new WebSocketServer({ port, host: "127.0.0.1" })
const listening = new Promise(resolve => wss.on("listening", resolve))
// The Repo connects its network adapter once its storage has said its id;
// a client that connects before then is never served. So "listening" is
// printed once both have happened.
const adapter = new WebSocketServerAdapter(wss)
const connected = new Promise(resolve => {
  const connect = adapter.connect.bind(adapter)
  adapter.connect = (...args) => { connect(...args); resolve() }
})
const repo = new Repo({
  network: [adapter],
  storage: dir ? new NodeFSStorageAdapter(dir) : undefined,
  peerId: `stock-server-${process.pid}`,
  sharePolicy: async () => false,
})
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, async () => {
    await repo.flush()
    process.exit(0)
  })
}
await Promise.all([listening, connected])
console.log(`listening ${wss.address().port}`)
