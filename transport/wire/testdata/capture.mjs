// capture.mjs records real frames exchanged between stock automerge-repo
// peers, for the codec's table tests. Run from the repository root:
//
//   node transport/wire/testdata/capture.mjs
//
// It starts the stock sync server (WebSocketServerAdapter) behind a recording
// proxy, connects two stock clients, and writes each distinct frame type in
// each direction to transport/wire/testdata/frames/<dir>-<type>.cbor.
import { Repo } from "@automerge/automerge-repo"
import {
  WebSocketClientAdapter,
  WebSocketServerAdapter,
} from "@automerge/automerge-repo-network-websocket"
import { decode } from "cbor-x"
import { WebSocketServer, WebSocket } from "ws"
import { writeFileSync, mkdirSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const out = join(dirname(fileURLToPath(import.meta.url)), "frames")
mkdirSync(out, { recursive: true })
const seen = new Set()
function record(dir, bytes) {
  const msg = decode(bytes)
  const name = `${dir}-${msg.type}`
  if (seen.has(name)) return
  seen.add(name)
  writeFileSync(join(out, `${name}.cbor`), bytes)
}

const upstream = new WebSocketServer({ port: 0 })
await new Promise(r => upstream.on("listening", r))
const server = new Repo({
  network: [new WebSocketServerAdapter(upstream)],
  peerId: "stock-server",
  sharePolicy: async () => false,
})

// The proxy forwards frames both ways and records them.
const proxy = new WebSocketServer({ port: 0 })
await new Promise(r => proxy.on("listening", r))
proxy.on("connection", client => {
  const up = new WebSocket(`ws://127.0.0.1:${upstream.address().port}`)
  const pending = []
  up.on("open", () => pending.splice(0).forEach(b => up.send(b)))
  client.on("message", b => {
    record("client", b)
    up.readyState === WebSocket.OPEN ? up.send(b) : pending.push(b)
  })
  up.on("message", b => {
    record("server", b)
    client.send(b)
  })
  client.on("close", () => up.close())
  up.on("close", () => client.close())
})
const url = `ws://127.0.0.1:${proxy.address().port}`

const a = new Repo({ network: [new WebSocketClientAdapter(url)], peerId: "client-a" })
const b = new Repo({ network: [new WebSocketClientAdapter(url)], peerId: "client-b" })
const handle = a.create({ text: "hello" })
await new Promise(r => setTimeout(r, 300))
const found = await b.find(handle.url)
handle.change(d => { d.text = "hello, world" })
found.broadcast({ cursor: 42 })
await new Promise(r => setTimeout(r, 300))
try {
  await b.find("automerge:2gzyVEWRbEhwBcRvStKvD3gBE5pp")
} catch {}
await new Promise(r => setTimeout(r, 300))
a.shutdown(); b.shutdown(); server.shutdown()
proxy.close(); upstream.close()
console.log([...seen].sort().join("\n"))
process.exit(0)
