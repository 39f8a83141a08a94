// The TypeScript client (web/client) against the real server, beside stock
// automerge-repo clients. Run with tsx's loader (npm run test:e2e does).
import { test } from "node:test"
import assert from "node:assert/strict"
import WebSocket from "ws"
import { Presence } from "@automerge/automerge-repo"
import { connect } from "../../../web/client/src/index.ts"
import { start, defer, until } from "./server.mjs"
import { client, connected } from "./clients.mjs"

// Sockets records every WebSocket the Tandem client opens, so that a test
// can cut one as a network failure would.
function recordingWebSocket() {
  const sockets = []
  class Recording extends WebSocket {
    constructor(url) {
      super(url)
      sockets.push(this)
    }
  }
  return { WebSocket: Recording, sockets }
}

function tandemClient(t, url, opts = {}) {
  const c = connect({ url, WebSocket, heartbeatMs: 500, backoff: { baseMs: 50, maxMs: 200 }, ...opts })
  defer(t, () => c.close())
  return c
}

test("a Tandem client and a stock client share a document and presence", async t => {
  const node = await start(t)
  const ana = tandemClient(t, node.url)
  const handle = ana.create({ text: "hello world" })
  const presence = ana.presence(handle, { user: { id: "ana", name: "Ana", color: "#e5484d" } })

  const repo = await connected(client(t, node.url))
  const hb = await repo.find(handle.url)
  const stock = new Presence({ handle: hb })
  stock.start({ initialState: { user: { id: "bo", name: "Bo", color: "#0090ff" } } })
  defer(t, () => stock.stop())

  // Ana sees Bo, Bo sees Ana's caret as an Automerge cursor.
  await until("Bo on Ana's side", () => presence.users().some(u => u.user.name === "Bo" && u.status === "online"))
  presence.setSelection(6, 6)
  await until("Ana's cursor on Bo's side", () => {
    const s = Object.values(stock.getPeerStates().value).find(p => p.value.user?.id === "ana")
    return s?.value.cursor && hb.doc().text.slice(0) && s
  })
  const anaState = Object.values(stock.getPeerStates().value).find(p => p.value.user?.id === "ana").value
  const A = await import("@automerge/automerge")
  assert.equal(A.getCursorPosition(hb.doc(), ["text"], anaState.cursor), 6)
  assert.equal(ana.state, "open")
  await until("an acknowledged heartbeat", () => ana.socket.rttMs !== undefined)
})

test("after its connection is cut, a Tandem client comes back and is known by name again", async t => {
  const node = await start(t)
  const rec = recordingWebSocket()
  const ana = tandemClient(t, node.url, { WebSocket: rec.WebSocket })
  const handle = ana.create({ text: "hello" })
  const presence = ana.presence(handle, { user: { id: "ana", name: "Ana", color: "#e5484d" } })

  const bo = tandemClient(t, node.url)
  const hb = await bo.open(handle.url)
  const boPresence = bo.presence(hb, { user: { id: "bo", name: "Bo", color: "#0090ff" } })
  await until("Ana on Bo's side", () => boPresence.users().some(u => u.user.name === "Ana" && u.status === "online"))
  await until("Bo on Ana's side", () => presence.users().some(u => u.user.name === "Bo"))

  // Bo's view as each event happens: she can be back (the client retries
  // within 50 ms) before a poll would see her offline.
  const seen = []
  boPresence.on("leave", p => seen.push(["leave", p.user.name, boPresence.users().map(u => `${u.user.name}:${u.status}`).join()]))
  boPresence.on("join", p => seen.push(["join", p.user.name]))

  // Cut Ana's socket: the server says goodbye for her to Bo.
  rec.sockets.at(-1).terminate()
  await until("Ana gone from Bo's side", () => seen.length > 0)
  assert.deepEqual(seen[0], ["leave", "Ana", "Ana:offline"])
  // She reconnects by herself and announces her whole state again, met
  // by name at once: her state comes as one snapshot, never a nameless
  // cursor first.
  await until("Ana online again on Bo's side", () => boPresence.users().some(u => u.user.name === "Ana" && u.status === "online"))
  assert.deepEqual(seen.slice(1), [["join", "Ana"]])
  presence.setSelection(2, 2)
  await until("her cursor under her name", () => boPresence.peers().some(p => p.user.name === "Ana" && boPresence.positionOf(p)?.head === 2))
  assert.deepEqual(boPresence.users().map(u => u.user.name), ["Ana"])
  assert.equal(rec.sockets.length, 2)
})
