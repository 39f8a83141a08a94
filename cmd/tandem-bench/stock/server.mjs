// The stock automerge-repo sync server, for side-by-side runs of
// tandem-bench: a Repo with the stock WebSocketServerAdapter, in memory,
// as users of automerge-repo would run it. Usage: node server.mjs <port>
// It prints "listening <port>" once it accepts connections.
import { WebSocketServer } from "ws"
import { Repo } from "@automerge/automerge-repo"
import { WebSocketServerAdapter } from "@automerge/automerge-repo-network-websocket"

const port = Number(process.argv[2] ?? 0)
const wss = new WebSocketServer({ port, host: "127.0.0.1" })
wss.on("listening", () => console.log(`listening ${wss.address().port}`))
new Repo({
  network: [new WebSocketServerAdapter(wss)],
  peerId: `stock-server-${process.pid}`,
  sharePolicy: async () => false,
})
process.on("SIGTERM", () => process.exit(0))
