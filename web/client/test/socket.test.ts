import { test, mock } from "node:test"
import assert from "node:assert/strict"
import type { PeerId } from "@automerge/automerge-repo/slim"
import { TandemSocket, type StateChange } from "../src/socket.js"
import { FakeSocket, handshake } from "./fakesocket.js"

function setup(t: { after(fn: () => void): void }, opts: Partial<ConstructorParameters<typeof TandemSocket>[0]> = {}) {
  mock.timers.enable({ apis: ["setTimeout", "Date"] })
  FakeSocket.all = []
  const a = new TandemSocket({ url: "ws://tandem.test/ws", WebSocket: FakeSocket, heartbeatMs: 1000, ...opts })
  const states: StateChange[] = []
  a.onState(c => states.push(c))
  const events: string[] = []
  a.on("peer-candidate", e => events.push(`candidate ${e.peerId}`))
  a.on("peer-disconnected", e => events.push(`disconnected ${e.peerId}`))
  a.on("message", m => events.push(`message ${m.type}`))
  t.after(() => {
    a.disconnect()
    mock.timers.reset()
  })
  a.connect("me" as PeerId, {})
  return { a, states, events, sock: () => FakeSocket.all.at(-1)! }
}


test("socket joins, becomes open on peer, and passes repo messages through", t => {
  const { a, states, events, sock } = setup(t, { token: "tok en" })
  const s = sock()
  assert.equal(s.url, "ws://tandem.test/ws?token=tok+en")
  assert.equal(a.state, "connecting")
  handshake(s)
  assert.deepEqual(s.sent[0], {
    type: "join",
    senderId: "me",
    peerMetadata: { tandemPresenceBatch: true },
    supportedProtocolVersions: ["1"],
  })
  assert.equal(a.state, "open")
  assert.equal(a.isReady(), true)
  s.deliver({ type: "sync", senderId: "server", targetId: "me", documentId: "x", data: new Uint8Array([1]) })
  assert.deepEqual(events, ["candidate server", "message sync"])
  assert.deepEqual(states.map(c => c.state), ["connecting", "open"])
})

test("acknowledged heartbeats keep the connection; jittered periods; rtt measured", t => {
  const { a, sock } = setup(t)
  const s = sock()
  handshake(s)
  const sentAt: number[] = []
  let acked = 0
  for (let ms = 0; ms < 20_000; ms++) {
    mock.timers.tick(1)
    const beats = s.beats()
    if (beats.length > sentAt.length) sentAt.push(Date.now())
    // Each beat is acknowledged 7 ms after it was sent.
    if (acked < sentAt.length && Date.now() - sentAt[acked] >= 7) {
      s.deliver({ type: "tandem-heartbeat-ack", senderId: "server", targetId: "me", seq: beats[acked].seq, serverTime: Date.now() })
      acked++
    }
  }
  assert.ok(sentAt.length >= 16 && sentAt.length <= 25, `${sentAt.length} beats in 20 s`)
  const gaps = sentAt.slice(1).map((t, i) => t - sentAt[i])
  assert.ok(gaps.every(g => g >= 800 && g <= 1200), `gaps ${gaps}`)
  assert.ok(new Set(gaps).size > 1, "periods are jittered")
  assert.equal(s.beats()[0].targetId, "server")
  assert.equal(a.state, "open")
  assert.equal(a.rttMs, 7)
})

test("three missed acks mean dead even though the socket looks open; reconnects with backoff", t => {
  // Jitter fixed mid-range: beats 1 s apart, a retry 250 ms after the drop
  // (a random draw of 0 would retry within the same tick of the clock).
  t.mock.method(Math, "random", () => 0.5)
  const { a, states, events, sock } = setup(t, { backoff: { baseMs: 500, maxMs: 500 } })
  const s = sock()
  handshake(s)
  for (let i = 0; i < 3; i++) mock.timers.tick(1200)
  assert.equal(s.beats().length, 3)
  assert.equal(a.state, "open")
  mock.timers.tick(1200)
  assert.equal(a.state, "closed")
  assert.equal(states.at(-1)!.reason, "dead")
  assert.ok(s.closed, "the dead socket is closed")
  assert.deepEqual(events, ["candidate server", "disconnected server"])
  // An ack arriving from the dead socket changes nothing.
  s.deliver({ type: "tandem-heartbeat-ack", seq: 3 })
  const retry = states.at(-1)!.retryInMs!
  assert.ok(retry >= 0 && retry < 500)
  mock.timers.tick(retry)
  assert.equal(FakeSocket.all.length, 2)
  assert.equal(a.state, "connecting")
  handshake(sock())
  assert.equal(a.state, "open")
  assert.deepEqual(events.at(-1), "candidate server")
})

test("a late ack for an older beat still proves the connection alive", t => {
  const { a, sock } = setup(t)
  const s = sock()
  handshake(s)
  mock.timers.tick(1200)
  mock.timers.tick(1200)
  s.deliver({ type: "tandem-heartbeat-ack", seq: 1 })
  for (let i = 0; i < 3; i++) mock.timers.tick(1200)
  assert.equal(a.state, "open")
})

test("a forged ack with an unknown seq does not count", t => {
  t.mock.method(Math, "random", () => 0.5) // no retry drawn at 0 ms, within the tick that drops it
  const { a, sock } = setup(t)
  const s = sock()
  handshake(s)
  for (let i = 0; i < 4; i++) {
    mock.timers.tick(1200)
    s.deliver({ type: "tandem-heartbeat-ack", seq: 999 })
  }
  assert.equal(a.state, "closed")
})

test("backoff grows over failed attempts and resets only after a connection that lasted", t => {
  const { states, sock } = setup(t, { backoff: { baseMs: 100, maxMs: 100_000 } })
  // Each attempt's delay is drawn below a ceiling that doubles.
  const ceilingOf = (i: number) => 100 * 2 ** i
  for (let i = 0; i < 6; i++) {
    sock().serverClose()
    const c = states.at(-1)!
    assert.equal(c.reason, "closed")
    assert.ok(c.retryInMs! < ceilingOf(i), `attempt ${i}: ${c.retryInMs}`)
    mock.timers.tick(c.retryInMs!)
  }
  // Accepted, then closed at once (say, rate-limited): the backoff keeps growing.
  handshake(sock())
  sock().serverClose(4005, "flood")
  assert.equal(states.at(-1)!.reason, "error")
  assert.equal(states.at(-1)!.error, "flood")
  mock.timers.tick(states.at(-1)!.retryInMs!)
  // A connection that lasts resets it.
  const s = sock()
  handshake(s)
  for (let i = 0; i < 10; i++) {
    mock.timers.tick(1200)
    s.ackAll()
  }
  assert.equal(states.at(-1)!.state, "open")
  s.serverClose()
  assert.ok(states.at(-1)!.retryInMs! < 100, "first retry after a lasting connection uses the base window")
})

test("an unsupported protocol or an expired static token stops retrying", t => {
  for (const code of [4002, 4004]) {
    const { a, states, sock } = setup(t, { token: "static" })
    handshake(sock())
    sock().serverClose(code, "nope")
    assert.deepEqual(
      { state: a.state, reason: states.at(-1)!.reason, error: states.at(-1)!.error, code: states.at(-1)!.code },
      { state: "closed", reason: "fatal", error: "nope", code },
    )
    const n = FakeSocket.all.length
    mock.timers.tick(120_000)
    assert.equal(FakeSocket.all.length, n, "no retry")
    a.disconnect()
    mock.timers.reset()
  }
})

test("a token function is asked again for every attempt, so an expired token is refreshed", async t => {
  let issued = 0
  const { states, sock } = setup(t, { token: () => `tok${++issued}`, backoff: { baseMs: 1, maxMs: 1 } })
  await Promise.resolve()
  await Promise.resolve()
  assert.equal(sock().url, "ws://tandem.test/ws?token=tok1")
  handshake(sock())
  sock().serverClose(4004, "token expired")
  assert.equal(states.at(-1)!.reason, "error")
  mock.timers.tick(1)
  await Promise.resolve()
  await Promise.resolve()
  assert.equal(sock().url, "ws://tandem.test/ws?token=tok2")
})

test("a non-fatal server error is reported but does not blame a later close", t => {
  const { a, states, sock } = setup(t)
  const errors: string[] = []
  a.onServerError(m => errors.push(m))
  const s = sock()
  handshake(s)
  s.deliver({ type: "error", senderId: "server", message: "document is read-only for you" })
  assert.deepEqual(errors, ["document is read-only for you"])
  assert.equal(a.state, "open")
  s.serverClose(1006)
  assert.equal(states.at(-1)!.reason, "closed")
  assert.equal(states.at(-1)!.error, undefined)
})

test("connect() again replaces the socket; the old one's late events are ignored", t => {
  const { a, states, sock } = setup(t)
  const first = sock()
  handshake(first)
  a.connect("me" as PeerId)
  const second = sock()
  assert.notEqual(first, second)
  assert.ok(first.closed)
  handshake(second)
  first.onclose?.({ code: 1006 }) // a close event queued before the detach
  first.serverClose()
  assert.equal(a.state, "open")
  assert.equal(states.at(-1)!.state, "open")
})

test("connect() after disconnect() opens nothing: a client closed at once stays closed", t => {
  const { a, sock } = setup(t)
  const opened = FakeSocket.all.length
  a.disconnect()
  assert.equal(sock().closed, true)
  a.connect("me" as PeerId, {})
  mock.timers.tick(60_000)
  assert.equal(FakeSocket.all.length, opened)
  assert.equal(a.state, "closed")
})

test("a connection attempt that never answers is dropped", t => {
  t.mock.method(Math, "random", () => 0.5) // no retry drawn at 0 ms, within the tick that drops it
  const { a, states } = setup(t)
  mock.timers.tick(3000)
  assert.equal(a.state, "closed")
  assert.equal(states.at(-1)!.reason, "dead")
})

test("a server error followed by a close with the server's code is reported with its message", t => {
  const { states, sock } = setup(t)
  const s = sock()
  handshake(s)
  s.deliver({ type: "error", senderId: "server", message: "too many documents" })
  s.serverClose(4000, "")
  assert.equal(states.at(-1)!.reason, "error")
  assert.equal(states.at(-1)!.error, "too many documents")
})

test("messages sent while disconnected are dropped, not thrown", t => {
  const { a, sock } = setup(t)
  a.send({ type: "sync", senderId: "me" as PeerId, targetId: "server" as PeerId, documentId: "x" as never, data: new Uint8Array([1]) })
  assert.equal(sock().sent.length, 0)
})

test("suspend closes without retrying and resume reconnects", t => {
  const { a, events, sock } = setup(t)
  handshake(sock())
  a.suspend()
  assert.equal(a.state, "closed")
  mock.timers.tick(60_000)
  assert.equal(FakeSocket.all.length, 1)
  a.resume()
  handshake(sock())
  assert.equal(a.state, "open")
  assert.deepEqual(events, ["candidate server", "disconnected server", "candidate server"])
})

test("a presence batch reaches the repo as one ephemeral message each, in order, without this peer's own", t => {
  const { a, sock } = setup(t)
  const got: Record<string, unknown>[] = []
  a.on("message", m => got.push(m as unknown as Record<string, unknown>))
  const s = sock()
  handshake(s)
  const d1 = new Uint8Array([0xa0]), d2 = new Uint8Array([0xa1, 0x61, 0x78, 0x01])
  s.deliver({
    type: "tandem-presence-batch",
    senderId: "server",
    documentId: "doc",
    sessionId: "relay",
    batch: [
      ["ana", 7, d1],
      ["me", 8, d1],
      ["bo", 9, d2],
    ],
  })
  assert.deepEqual(
    got.map(m => [m.type, m.senderId, m.targetId, m.documentId, m.sessionId, m.count, m.data]),
    [
      ["ephemeral", "ana", "me", "doc", "relay", 7, d1],
      ["ephemeral", "bo", "me", "doc", "relay", 9, d2],
    ],
  )
  s.deliver({ type: "tandem-presence-batch", documentId: "doc", sessionId: "relay", batch: [["x", 1]] })
  s.deliver({ type: "tandem-presence-batch", documentId: "doc", batch: "nonsense" })
  assert.equal(got.length, 2, "malformed batches and entries are ignored")
})

test("an ephemeral message the server sent, which the repo passes on, is not sent back; another peer's from elsewhere is", t => {
  const { a, sock } = setup(t)
  const s = sock()
  handshake(s)
  const data = new Uint8Array([0xa0])
  const fromServer = { type: "ephemeral", senderId: "ana", targetId: "me", documentId: "doc", sessionId: "s", count: 1, data }
  s.deliver(fromServer)
  s.deliver({ type: "tandem-presence-batch", senderId: "server", documentId: "doc", sessionId: "t", batch: [["bo", 4, data]] })
  const send = (m: object) => a.send({ ...m, targetId: "server" } as unknown as Parameters<typeof a.send>[0])
  send(fromServer) // the repo passes them on
  send({ type: "ephemeral", senderId: "bo", documentId: "doc", sessionId: "t", count: 4, data })
  send({ type: "ephemeral", senderId: "cy", documentId: "doc", sessionId: "u", count: 1, data }) // from another adapter
  send({ type: "ephemeral", senderId: "me", documentId: "doc", sessionId: "v", count: 1, data })
  assert.deepEqual(s.sent.filter(m => m.type === "ephemeral").map(m => m.senderId), ["cy", "me"])
})
