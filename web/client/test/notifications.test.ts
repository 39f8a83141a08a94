import { test, mock } from "node:test"
import assert from "node:assert/strict"
import {
  TandemNotifications,
  NotificationsError,
  httpOrigin,
  type EventSourceLike,
  type FetchFunction,
  type Notification,
  type NotificationsConfig,
  type NotificationsState,
  type ServerSentEvent,
} from "../src/notifications.js"
import { TandemClient } from "../src/client.js"
import type { SocketLike } from "../src/socket.js"

// FakeEventSource lets a test play the server's side of a stream.
class FakeEventSource implements EventSourceLike {
  static all: FakeEventSource[] = []
  readyState = 0
  closed = false
  #listeners = new Map<string, ((ev: ServerSentEvent) => void)[]>()
  constructor(readonly url: string) {
    FakeEventSource.all.push(this)
  }
  addEventListener(type: string, listener: (ev: ServerSentEvent) => void) {
    this.#listeners.set(type, [...(this.#listeners.get(type) ?? []), listener])
  }
  close() {
    this.closed = true
    this.readyState = 2
  }
  // server side
  fire(type: string, ev: ServerSentEvent = {}) {
    for (const l of this.#listeners.get(type) ?? []) l(ev)
  }
  open(unread = 0) {
    this.readyState = 1
    this.fire("open")
    this.fire("unread", { data: JSON.stringify({ unread }) })
  }
  push(n: Notification, unread: number) {
    this.fire("notification", { data: JSON.stringify({ type: "notification", notification: n, unread }), lastEventId: String(n.id) })
  }
  read(unread: number) {
    this.fire("read", { data: JSON.stringify({ type: "read", unread }) })
  }
  // The connection dropped; the browser retries (giveUp false) or has given up.
  fail(giveUp: boolean) {
    this.readyState = giveUp ? 2 : 0
    this.fire("error")
  }
  static last() {
    return FakeEventSource.all.at(-1)!
  }
}

interface Call {
  url: URL
  method: string
  headers: Record<string, string>
  body: unknown
}

// fakeServer answers the notification API from a list of stored
// notifications and records every request.
function fakeServer() {
  const calls: Call[] = []
  const state = { stored: [] as Notification[], unread: 0, status: 200, error: "" }
  const fetch: FetchFunction = async (url, init) => {
    const call: Call = {
      url: new URL(url),
      method: init?.method ?? "GET",
      headers: init?.headers ?? {},
      body: init?.body === undefined ? undefined : JSON.parse(init.body),
    }
    calls.push(call)
    let body: unknown
    if (state.status !== 200) {
      body = { error: state.error }
    } else if (call.url.pathname === "/api/notifications/read") {
      body = { unread: state.unread }
    } else {
      const q = call.url.searchParams
      const limit = Number(q.get("limit") ?? 20)
      const before = Number(q.get("before") ?? 0)
      const all = [...state.stored].sort((a, b) => b.id - a.id)
      const page = all.filter(n => (!before || n.id < before) && (q.get("unread") !== "true" || !n.read)).slice(0, limit)
      body = { notifications: page, unread: state.unread, next: page.length === limit ? page.at(-1)!.id : 0 }
    }
    const status = state.status
    return { ok: status < 300, status, json: async () => body, text: async () => JSON.stringify(body) }
  }
  return { calls, state, fetch }
}

function note(id: number, extra: Partial<Notification> = {}): Notification {
  return {
    id,
    recipient: "ana",
    kind: "mention",
    document: "doc1",
    title: "Roadmap",
    text: `Bo mentioned you in Roadmap (${id})`,
    actors: [{ id: "bo", name: "Bo" }],
    actorCount: 1,
    events: 1,
    firstAt: 1000 * id,
    lastAt: 1000 * id,
    createdAt: 1000 * id,
    read: false,
    ...extra,
  }
}

const flush = () => new Promise<void>(r => setImmediate(r))

function setup(t: { after(fn: () => void): void }, config: Partial<NotificationsConfig> = {}) {
  FakeEventSource.all = []
  const server = fakeServer()
  const n = new TandemNotifications({
    url: "wss://tandem.test/ws",
    user: "ana",
    EventSource: FakeEventSource,
    fetch: server.fetch,
    ...config,
  })
  t.after(() => n.close())
  const got: Notification[] = []
  const unread: number[] = []
  const reads: (number[] | "all" | undefined)[] = []
  const states: NotificationsState[] = []
  n.on("notification", x => got.push(x))
  n.on("unread", c => unread.push(c))
  n.on("read", ids => reads.push(ids))
  n.on("state", s => states.push(s))
  return { n, server, got, unread, reads, states }
}

test("the API's origin comes from the WebSocket URL", () => {
  assert.equal(httpOrigin("wss://tandem.test/ws"), "https://tandem.test")
  assert.equal(httpOrigin("ws://localhost:8080/some/ws?x=1"), "http://localhost:8080")
  assert.equal(httpOrigin("https://tandem.test/ws"), "https://tandem.test")
})

test("the stream is at /api/notifications/stream on the same host, with the user", t => {
  const { n } = setup(t)
  const u = new URL(FakeEventSource.last().url)
  assert.equal(u.origin, "https://tandem.test")
  assert.equal(u.pathname, "/api/notifications/stream")
  assert.equal(u.searchParams.get("user"), "ana")
  assert.equal(u.searchParams.has("token"), false)
  assert.equal(n.origin, "https://tandem.test")
})

test("without a token a user is required", () => {
  assert.throws(() => new TandemNotifications({ url: "ws://x/ws", EventSource: FakeEventSource, fetch: fakeServer().fetch }), /user is required/)
})

test("pushes: new notifications are emitted once, duplicates dropped, unread follows the stream", async t => {
  const { n, got, unread, states } = setup(t)
  assert.equal(n.state, "connecting")
  const es = FakeEventSource.last()
  es.open(2)
  assert.equal(n.state, "open")
  assert.equal(n.unread, 2)
  es.push(note(7), 3)
  es.push(note(8), 4)
  es.push(note(7), 4) // at least once: a second delivery
  assert.deepEqual(got.map(x => x.id), [7, 8])
  assert.equal(got[0].text, "Bo mentioned you in Roadmap (7)")
  assert.equal(n.unread, 4)
  assert.deepEqual(unread, [2, 3, 4])
  assert.deepEqual(states, ["open"])
  // The unread count is already current when "notification" fires.
  let seen = -1
  n.on("notification", () => (seen = n.unread))
  es.push(note(9), 5)
  assert.equal(seen, 5)
  await flush()
})

test("a read event from another tab updates the count and says read", async t => {
  const { n, unread, reads } = setup(t)
  const es = FakeEventSource.last()
  es.open(3)
  es.read(1)
  assert.equal(n.unread, 1)
  assert.deepEqual(unread, [3, 1])
  assert.deepEqual(reads, [undefined])
  await flush()
})

test("malformed events are ignored", async t => {
  const { n, got } = setup(t)
  const es = FakeEventSource.last()
  es.open(1)
  es.fire("notification", { data: "not json" })
  es.fire("notification", { data: JSON.stringify({ notification: { id: "x", text: 1 }, unread: 9 }) })
  es.fire("unread", { data: JSON.stringify({ unread: -1 }) })
  assert.equal(got.length, 0)
  assert.equal(n.unread, 1)
  await flush()
})

test("markRead posts the ids or all to /api/notifications/read and takes the count", async t => {
  const { n, server, reads, unread } = setup(t, { live: false })
  server.state.unread = 5
  assert.equal(await n.markRead([1, 2]), 5)
  const c = server.calls[0]
  assert.equal(c.method, "POST")
  assert.equal(c.url.origin + c.url.pathname, "https://tandem.test/api/notifications/read")
  assert.equal(c.url.searchParams.get("user"), "ana")
  assert.equal(c.headers["content-type"], "application/json")
  assert.deepEqual(c.body, { ids: [1, 2] })
  server.state.unread = 0
  assert.equal(await n.markRead("all"), 0)
  assert.deepEqual(server.calls[1].body, { all: true })
  assert.deepEqual(reads, [[1, 2], "all"])
  assert.deepEqual(unread, [5, 0])
  assert.equal(n.unread, 0)
  // Nothing to mark: no request.
  await n.markRead([])
  assert.equal(server.calls.length, 2)
  // The server takes at most 1000 ids per request.
  await n.markRead(Array.from({ length: 2500 }, (_, i) => i + 1))
  assert.deepEqual(server.calls.slice(2).map(c => (c.body as { ids: number[] }).ids.length), [1000, 1000, 500])
})

test("a token goes as ?token= on every request and the stream; a token function is asked each time", async t => {
  let issued = 0
  const { n, server } = setup(t, { user: undefined, token: async () => `tok${++issued}` })
  await flush()
  const stream = new URL(FakeEventSource.last().url)
  assert.equal(stream.searchParams.get("token"), "tok1")
  assert.equal(stream.searchParams.has("user"), false)
  await n.list()
  await n.markRead([3])
  assert.deepEqual(server.calls.map(c => c.url.searchParams.get("token")), ["tok2", "tok3"])
  assert.ok(server.calls.every(c => !c.url.searchParams.has("user")))

  const fixed = setup(t, { token: "secret", live: false })
  await fixed.n.markRead("all")
  assert.equal(fixed.server.calls[0].url.searchParams.get("token"), "secret")
  assert.equal(fixed.server.calls[0].url.searchParams.get("user"), "ana") // given, so sent too
})

test("list passes its options, and its ids count as seen for pushes", async t => {
  const { n, server, got, unread } = setup(t)
  server.state.stored = [note(1), note(2, { read: true }), note(3)]
  server.state.unread = 2
  const page = await n.list({ unread: true, limit: 20, before: 10 })
  const q = server.calls[0].url.searchParams
  assert.equal(server.calls[0].url.pathname, "/api/notifications")
  assert.equal(q.get("user"), "ana")
  assert.equal(q.get("unread"), "true")
  assert.equal(q.get("limit"), "20")
  assert.equal(q.get("before"), "10")
  assert.deepEqual(page.notifications.map(x => x.id), [3, 1])
  assert.equal(page.unread, 2)
  assert.equal(page.next, 0)
  assert.equal(n.unread, 2)
  assert.deepEqual(unread, [2])
  const es = FakeEventSource.last()
  es.open(2)
  es.push(note(3), 2) // listed already
  es.push(note(4), 3)
  assert.deepEqual(got.map(x => x.id), [4])
  await flush()
  // Without options: no unread, limit or before parameters.
  await n.list()
  const q2 = server.calls.at(-1)!.url.searchParams
  assert.deepEqual([...q2.keys()], ["user"])
})

test("an HTTP answer's count does not overwrite a push that arrived meanwhile", async t => {
  const { n, server } = setup(t)
  const es = FakeEventSource.last()
  es.open(1)
  await flush()
  server.state.unread = 0
  const marking = n.markRead([1]) // the server answers 0...
  es.push(note(9), 1) // ...but a newer notification came in on the stream
  assert.equal(await marking, 1)
  assert.equal(n.unread, 1)
})

test("HTTP errors reject with the status and the server's message", async t => {
  const { n, server } = setup(t, { live: false })
  server.state.status = 403
  server.state.error = "a token reads only its own user's notifications"
  await assert.rejects(n.list(), (e: unknown) => {
    assert.ok(e instanceof NotificationsError)
    assert.equal(e.status, 403)
    assert.match(e.message, /only its own user's/)
    return true
  })
})

test("when the browser retries by itself the state is connecting; when it gives up, a new stream after a backoff", async t => {
  mock.timers.enable({ apis: ["setTimeout"] })
  t.after(() => mock.timers.reset())
  let issued = 0
  const { n, server, got, states } = setup(t, { user: undefined, token: () => `tok${++issued}`, backoff: { baseMs: 1000, maxMs: 1000 } })
  server.state.stored = [note(1), note(2)]
  await flush()
  const first = FakeEventSource.last()
  first.open(2)
  await flush() // the first connection learns the newest id (2) and emits nothing
  assert.equal(got.length, 0)
  assert.equal(server.calls.at(-1)!.url.searchParams.get("limit"), "1")

  first.fail(false)
  assert.equal(n.state, "connecting")
  first.open(2) // the browser's own reconnection
  assert.equal(n.state, "open")
  await flush()

  first.fail(true) // e.g. the token expired: the browser gives up
  assert.equal(n.state, "closed")
  assert.ok(first.closed)
  assert.equal(FakeEventSource.all.length, 1)
  // Meanwhile two notifications were stored.
  server.state.stored.push(note(3), note(4))
  mock.timers.tick(1000)
  await flush()
  assert.equal(FakeEventSource.all.length, 2)
  const second = FakeEventSource.last()
  assert.notEqual(new URL(second.url).searchParams.get("token"), new URL(first.url).searchParams.get("token"), "a fresh token")
  assert.equal(n.state, "connecting")
  second.open(4)
  // The server also pushes 4 (at least once): it is emitted only once.
  second.push(note(4), 4)
  await flush()
  await flush()
  assert.deepEqual(got.map(x => x.id).sort(), [3, 4])
  assert.deepEqual(states, ["open", "connecting", "open", "closed", "connecting", "open"])
  // Events of the stream given up on are ignored.
  first.push(note(5), 5)
  assert.equal(got.length, 2)
})

test("close stops the stream and its events", async t => {
  const { n, got, states } = setup(t)
  const es = FakeEventSource.last()
  es.open(0)
  n.close()
  assert.ok(es.closed)
  assert.equal(n.state, "closed")
  es.push(note(1), 1)
  assert.equal(got.length, 0)
  assert.deepEqual(states, ["open", "closed"])
  await flush()
})

test("suspend closes the stream, resume opens a new one", async t => {
  const { n } = setup(t)
  const es = FakeEventSource.last()
  es.open(0)
  n.suspend()
  assert.ok(es.closed)
  assert.equal(n.state, "closed")
  n.resume()
  assert.equal(FakeEventSource.all.length, 2)
  assert.equal(n.state, "connecting")
  await flush()
})

// A WebSocket that never connects: enough for a client that is only closed.
class SilentSocket implements SocketLike {
  binaryType = ""
  readyState = 0
  onopen = null
  onclose = null
  onerror = null
  onmessage = null
  send() {}
  close() {}
}

test("TandemClient.notifications shares the client's server and token, and close closes it", async () => {
  FakeEventSource.all = []
  const client = new TandemClient({ url: "wss://tandem.test/ws", token: "tok", WebSocket: SilentSocket })
  const n = client.notifications({ EventSource: FakeEventSource, fetch: fakeServer().fetch })
  const u = new URL(FakeEventSource.last().url)
  assert.equal(u.origin + u.pathname, "https://tandem.test/api/notifications/stream")
  assert.equal(u.searchParams.get("token"), "tok")
  // The repo connects its adapter asynchronously; a close before that
  // would be undone by the connect.
  await flush()
  client.close()
  assert.ok(FakeEventSource.last().closed)
  assert.equal(n.state, "closed")
  const open = new TandemClient({ url: "ws://x/ws", WebSocket: SilentSocket })
  assert.throws(() => open.notifications({ EventSource: FakeEventSource }), /user is required/)
  await flush()
  open.close()
})
