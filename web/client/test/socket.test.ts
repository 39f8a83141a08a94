import { test, mock } from "node:test"
import assert from "node:assert/strict"
import { cbor } from "@automerge/automerge-repo/slim"
import type { PeerId } from "@automerge/automerge-repo/slim"
import { TandemSocket, type SocketLike, type StateChange } from "../src/socket.js"

// FakeSocket records what the adapter sends and lets the test play the server.
class FakeSocket implements SocketLike {
  static all: FakeSocket[] = []
  binaryType = ""
  readyState = 0
  onopen: ((ev: unknown) => void) | null = null
  onclose: ((ev: unknown) => void) | null = null
  onerror: ((ev: unknown) => void) | null = null
  onmessage: ((ev: { data: unknown }) => void) | null = null
  sent: Record<string, unknown>[] = []
  closed = false
  constructor(readonly url: string) {
    FakeSocket.all.push(this)
  }
  send(data: ArrayBufferLike | ArrayBufferView) {
    this.sent.push(cbor.decode(data as Uint8Array))
  }
  close() {
    this.closed = true
  }
  // server side
  open() {
    this.readyState = 1
    this.onopen?.({})
  }
  deliver(m: Record<string, unknown>) {
    const b = cbor.encode(m)
    this.onmessage?.({ data: b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) })
  }
  serverClose() {
    this.readyState = 3
    this.onclose?.({})
  }
  beats() {
    return this.sent.filter(m => m.type === "tandem-heartbeat")
  }
}

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

function handshake(s: FakeSocket) {
  s.open()
  s.deliver({ type: "peer", senderId: "server", targetId: "me", peerMetadata: {}, selectedProtocolVersion: "1" })
}

test("socket joins, becomes open on peer, and passes repo messages through", t => {
  const { a, states, events, sock } = setup(t, { token: "tok en" })
  const s = sock()
  assert.equal(s.url, "ws://tandem.test/ws?token=tok+en")
  assert.equal(a.state, "connecting")
  handshake(s)
  assert.deepEqual(s.sent[0], { type: "join", senderId: "me", peerMetadata: {}, supportedProtocolVersions: ["1"] })
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
  for (let i = 0; i < 10; i++) {
    const before = s.beats().length
    mock.timers.tick(799)
    assert.equal(s.beats().length, before, "no beat before 80% of the period")
    mock.timers.tick(401)
    assert.equal(s.beats().length, before + 1, "one beat by 120% of the period")
    const beat = s.beats().at(-1)!
    assert.equal(beat.targetId, "server")
    mock.timers.tick(7)
    s.deliver({ type: "tandem-heartbeat-ack", senderId: "server", targetId: "me", seq: beat.seq, serverTime: Date.now() })
  }
  assert.equal(a.state, "open")
  assert.equal(a.rttMs, 7)
})

test("three missed acks mean dead even though the socket looks open; reconnects with backoff", t => {
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
  const { a, sock } = setup(t)
  const s = sock()
  handshake(s)
  for (let i = 0; i < 4; i++) {
    mock.timers.tick(1200)
    s.deliver({ type: "tandem-heartbeat-ack", seq: 999 })
  }
  assert.equal(a.state, "closed")
})

test("backoff grows over failed attempts and resets after a successful connection", t => {
  const { states, sock } = setup(t, { backoff: { baseMs: 100, maxMs: 100_000 } })
  const ceilings: number[] = []
  for (let i = 0; i < 6; i++) {
    sock().serverClose()
    const c = states.at(-1)!
    assert.equal(c.reason, "closed")
    ceilings.push(c.retryInMs!)
    assert.ok(c.retryInMs! < 100 * 2 ** i, `attempt ${i}: ${c.retryInMs}`)
    mock.timers.tick(c.retryInMs!)
  }
  handshake(sock())
  sock().serverClose()
  assert.ok(states.at(-1)!.retryInMs! < 100, "first retry after a good connection uses the base window")
})

test("a connection attempt that never answers is dropped", t => {
  const { a, states } = setup(t)
  mock.timers.tick(3000)
  assert.equal(a.state, "closed")
  assert.equal(states.at(-1)!.reason, "dead")
})

test("a server error is reported with its message", t => {
  const { states, sock } = setup(t)
  const s = sock()
  handshake(s)
  s.deliver({ type: "error", senderId: "server", message: "too many documents" })
  s.serverClose()
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
