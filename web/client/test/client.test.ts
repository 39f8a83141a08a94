import { test, mock } from "node:test"
import assert from "node:assert/strict"
import { cbor } from "@automerge/automerge-repo/slim"
import { connect } from "../src/client.js"
import { FakeSocket, handshake } from "./fakesocket.js"

// settled waits until cond holds, letting the repo's promise chains run
// (timers stay frozen); it fails after many rounds of the event loop.
async function settled(what: string, cond: () => boolean) {
  for (let i = 0; i < 1000; i++) {
    if (cond()) return
    await new Promise(r => setImmediate(r))
  }
  assert.fail(`never: ${what}`)
}

// presenceAfterSync returns the type of the first presence message the
// socket sent after the first sync message of documentId.
function presenceAfterSync(s: FakeSocket, documentId: string): string | undefined {
  const sync = s.sent.findIndex(m => (m.type === "sync" || m.type === "request") && m.documentId === documentId)
  if (sync < 0) return undefined
  for (const m of s.sent.slice(sync + 1)) {
    if (m.type !== "ephemeral" || m.documentId !== documentId) continue
    const p = (cbor.decode(m.data as Uint8Array) as { __presence?: { type: string } }).__presence
    if (p) return p.type
  }
  return undefined
}

// With every timer frozen, the only way a presence's state reaches the
// server is the client's answer to the repo syncing the document: at the
// start (a document just created is synced after the first snapshot was
// sent into the void) and after a reconnection (the server said goodbye
// for this peer). The 500 ms fallback never runs here.
test("a presence announces itself as soon as the repo syncs its document with the server, after a reconnection too", async t => {
  mock.timers.enable({ apis: ["setTimeout"] })
  t.mock.method(Math, "random", () => 0.5) // a retry 25 ms after the drop
  FakeSocket.all = []
  const c = connect({ url: "ws://tandem.test/ws", WebSocket: FakeSocket, backoff: { baseMs: 50, maxMs: 50 } })
  t.after(() => {
    c.close()
    mock.timers.reset()
  })
  await settled("the repo connects the socket", () => FakeSocket.all.length === 1)
  handshake(FakeSocket.all[0])
  const h = c.create({ text: "hello" })
  c.presence(h, { user: { id: "ana", name: "Ana", color: "#e66" } })
  await settled("a snapshot after the first sync", () => presenceAfterSync(FakeSocket.all[0], h.documentId) === "snapshot")

  FakeSocket.all[0].serverClose(1006)
  assert.equal(c.socket.state, "closed")
  mock.timers.tick(25)
  assert.equal(FakeSocket.all.length, 2, "the client reconnects")
  handshake(FakeSocket.all[1])
  await settled("a snapshot after the sync on the new connection", () => presenceAfterSync(FakeSocket.all[1], h.documentId) === "snapshot")
})
