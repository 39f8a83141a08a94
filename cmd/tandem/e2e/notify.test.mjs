// End-to-end: notifications. Mentions typed by a stock client, a burst of
// a thousand events folded into one notification and pushed across nodes,
// a node killed in the middle of a window, and one user's notifications
// kept from another's token. Real PostgreSQL and Redis where they matter.
import { test } from "node:test"
import assert from "node:assert/strict"
import { createHmac, randomUUID } from "node:crypto"
import { Presence } from "@automerge/automerge-repo"
import * as A from "@automerge/automerge"
import { start, startRedis, postgresURL, psql, until } from "./server.mjs"
import { client, connected, streamEvents } from "./clients.mjs"

// Users are unique per run: the test database outlives runs.
const run = randomUUID().slice(0, 8)
const user = name => `${name}-${run}`

const notificationsOf = events => events.filter(e => e.event === "notification").map(e => e.data.notification)

async function post(node, event, headers = {}) {
  return fetch(`${node.http}/api/notifications`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(event),
  })
}

async function list(node, query, headers = {}) {
  const res = await fetch(`${node.http}/api/notifications?${query}`, { headers })
  return { status: res.status, body: await res.json() }
}

test("a mention typed by a stock client reaches the mentioned user's stream once, stored first", async t => {
  const node = await start(t, { args: ["--notify-window", "500ms"] })
  const bo = user("bo")
  const stream = await streamEvents(t, `${node.http}/api/notifications/stream?user=${bo}`)
  assert.equal(stream.res.status, 200)
  await until("the initial unread count", () => stream.events.some(e => e.event === "unread"))

  const repo = await connected(client(t, node.url))
  const handle = repo.create({ text: "" })
  handle.change(d => A.splice(d, ["text"], 0, 0, "Roadmap\n"))
  // The document is on the server before Ana announces herself: a stock
  // client's first snapshot for a document it has just created can go out
  // before the server is its peer there, and nothing repeats it.
  await (await connected(client(t, node.url))).find(handle.url)
  const presence = new Presence({ handle })
  presence.start({ initialState: { user: { id: user("ana"), name: "Ana", color: "#e5484d" } } })
  t.after(() => presence.stop())
  // In open mode the server knows Ana's name from her presence.
  await until("Ana's presence on the server", async () => {
    const res = await fetch(`${node.http}/api/docs/${handle.documentId}/presence`)
    return (await res.json()).peers.some(p => p.userId === user("ana"))
  }, 30000)
  // Typed one key at a time, as an editor sends it.
  const typed = `hi @${bo} and @${user("cy")} `
  for (const [i, ch] of [...typed].entries()) handle.change(d => A.splice(d, ["text"], 8 + i, 0, ch))

  await until("Bo's notification", () => notificationsOf(stream.events).length === 1, 20000)
  const [n] = notificationsOf(stream.events)
  assert.equal(n.text, "Ana mentioned you in Roadmap")
  assert.deepEqual([n.kind, n.document, n.events, n.recipient], ["mention", handle.documentId, 1, bo])
  // Stored before it was pushed: listed the moment it arrives.
  const { body } = await list(node, `user=${bo}`)
  assert.deepEqual(body.notifications.map(x => x.id), [n.id])
  assert.equal(body.unread, 1)

  // Re-syncing the document (a second client, a restart of this one's
  // sync) inserts no mention; marking it read reaches the stream.
  const other = await connected(client(t, node.url))
  await other.find(handle.url)
  const res = await fetch(`${node.http}/api/notifications/read?user=${bo}`, { method: "POST", body: JSON.stringify({ all: true }) })
  assert.deepEqual(await res.json(), { unread: 0 })
  await until("the read event", () => stream.events.some(e => e.event === "read" && e.data.unread === 0))
  // A later event arrives after everything before it: still one mention.
  assert.equal((await post(node, { recipient: bo, kind: "marker", actor: "test" })).status, 202)
  await until("the marker", () => notificationsOf(stream.events).some(x => x.kind === "marker"), 20000)
  assert.equal(notificationsOf(stream.events).filter(x => x.kind === "mention").length, 1)
  assert.equal((await list(node, `user=${user("cy")}`)).body.notifications.length, 1, "cy was mentioned too")
})

test("a thousand events on node 1 become one notification pushed to node 2 within 1 s of the window", async t => {
  const redis = await startRedis(t)
  // The window is long enough for the thousand posts to land in it.
  const window = 10000
  const args = ["--redis-url", redis.url, "--postgres-url", postgresURL, "--notify-window", `${window}ms`]
  // An application's backend posts the thousand at once from one address:
  // the API's rate for an address is raised for it, as a deployment whose
  // backend posts notifications raises it.
  const n1 = await start(t, { args: [...args, "--node-id", "n1", "--api-rate-per-ip", "100000"] })
  const n2 = await start(t, { args: [...args, "--node-id", "n2"] })
  const cy = user("cy")
  const stream = await streamEvents(t, `${n2.http}/api/notifications/stream?user=${cy}`)
  await until("the stream", () => stream.events.some(e => e.event === "unread"))

  const names = ["Ana", "Bo", "Di", "Ed", "Fa", "Gu", "Ha", "Io", "Jo", "Ka", "Lu", "Mo", "Nu"]
  let next = 0
  const poster = async () => {
    for (let i; (i = next++) < 1000; ) {
      const a = i % names.length
      const res = await post(n1, { recipient: cy, kind: "mention", document: "doc-roadmap", title: "Roadmap", actor: `u${a}`, actorName: names[a] })
      assert.equal(res.status, 202)
    }
  }
  const began = Date.now()
  await Promise.all(Array.from({ length: 16 }, poster))
  assert.ok(Date.now() - began < window, `posting took ${Date.now() - began} ms, longer than the window`)

  await until("the push on node 2", () => notificationsOf(stream.events).length === 1, 30000)
  const push = stream.events.find(e => e.event === "notification")
  const n = push.data.notification
  assert.equal(n.events, 1000)
  assert.equal(n.actorCount, 13)
  assert.equal(n.text, `${n.actors[0].name} and 12 others mentioned you in Roadmap`)
  const late = push.at - (n.firstAt + window)
  assert.ok(late < 1000, `pushed ${late} ms after the window closed`)
  // Stored before pushed, and readable on either node.
  assert.deepEqual((await list(n2, `user=${cy}`)).body.notifications.map(x => x.id), [n.id])
  assert.deepEqual((await list(n1, `user=${cy}`)).body.notifications.map(x => x.id), [n.id])

  // One push only: a later event's notification comes after it, and no
  // second copy of the first came before.
  assert.equal((await post(n1, { recipient: cy, kind: "marker", actor: "test" })).status, 202)
  await until("the marker", () => notificationsOf(stream.events).some(x => x.kind === "marker"), 20000)
  assert.deepEqual(notificationsOf(stream.events).map(x => x.kind), ["mention", "marker"])
  assert.equal((await list(n2, `user=${cy}`)).body.notifications.length, 2)
})

test("a node killed in the middle of a window delivers the notification exactly once after restart", async t => {
  const redis = await startRedis(t)
  const args = ["--postgres-url", postgresURL, "--redis-url", redis.url, "--notify-window", "6s"]
  const node = await start(t, { args })
  const di = user("di")
  for (let i = 0; i < 100; i++) {
    assert.equal((await post(node, { recipient: di, kind: "comment", document: "doc-k", title: "Budget", verb: "commented on", actor: "ed", actorName: "Ed" })).status, 202)
  }
  // Every event is folded into the open window, which is not due yet.
  await until("events folded", () =>
    psql(`SELECT (SELECT count(*) FROM tandem_notify_events WHERE recipient = '${di}' AND window_id IS NOT NULL) || ' ' ||
                 (SELECT count(*) FROM tandem_notify_windows WHERE recipient = '${di}')`) === "100 1")
  await node.kill("SIGKILL")

  const again = await start(t, { args })
  const stream = await streamEvents(t, `${again.http}/api/notifications/stream?user=${di}`)
  await until("the notification after the restart", () => notificationsOf(stream.events).length === 1, 30000)
  const [n] = notificationsOf(stream.events)
  assert.deepEqual([n.events, n.text], [100, "Ed commented on Budget"])
  assert.equal((await post(again, { recipient: di, kind: "marker", actor: "test" })).status, 202)
  await until("the marker", () => notificationsOf(stream.events).some(x => x.kind === "marker"), 20000)
  assert.deepEqual(notificationsOf(stream.events).map(x => x.kind), ["comment", "marker"])
  assert.equal((await list(again, `user=${di}`)).body.notifications.length, 2)
})

const secret = "an-e2e-secret-that-is-32-bytes!!"
function token(claims) {
  claims = { exp: Math.floor(Date.now() / 1000) + 3600, ...claims } // tokens must expire
  const b64 = v => Buffer.from(JSON.stringify(v)).toString("base64url")
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}`
  return `${body}.${createHmac("sha256", secret).update(body).digest("base64url")}`
}

test("with tokens, nobody reads, marks or posts another user's notifications", async t => {
  const redis = await startRedis(t)
  const node = await start(t, { args: ["--auth-secret", secret, "--postgres-url", postgresURL, "--redis-url", redis.url, "--notify-window", "300ms"] })
  const [ana, bo] = [user("ana"), user("bo")]
  const as = sub => ({ authorization: `Bearer ${token({ sub, name: sub.split("-")[0], docs: {} })}` })
  const service = { authorization: `Bearer ${token({ sub: "app", docs: {}, notify: true })}` }

  assert.equal((await list(node, "")).status, 401, "no token")
  const anaStream = await streamEvents(t, `${node.http}/api/notifications/stream`, as(ana))
  const boStream = await streamEvents(t, `${node.http}/api/notifications/stream`, as(bo))
  await until("both streams", () => anaStream.events.length > 0 && boStream.events.length > 0)

  // A user's token posts only to that user, and only as that user.
  assert.equal((await post(node, { recipient: ana, kind: "comment", actor: bo }, as(bo))).status, 403)
  assert.equal((await post(node, { recipient: bo, kind: "note", actor: ana, actorName: "Forged" }, as(bo))).status, 202)
  // A service token posts to anyone.
  assert.equal((await post(node, { recipient: ana, kind: "comment", actor: "cy", actorName: "Cy", title: "Plan" }, service)).status, 202)

  await until("Ana's push", () => notificationsOf(anaStream.events).length === 1, 20000)
  await until("Bo's push", () => notificationsOf(boStream.events).length === 1, 20000)
  const anas = notificationsOf(anaStream.events)[0]
  const bos = notificationsOf(boStream.events)[0]
  assert.equal(anas.text, "Cy comment Plan")
  assert.deepEqual(bos.actors, [{ id: bo, name: "bo" }], "the actor is the token's user, not the one claimed")
  // Each stream carried its own user's notification only.
  assert.ok(notificationsOf(boStream.events).every(n => n.recipient === bo))
  assert.ok(notificationsOf(anaStream.events).every(n => n.recipient === ana))

  // Bo cannot list Ana's, nor name her.
  assert.equal((await list(node, `user=${ana}`, as(bo))).status, 403)
  assert.deepEqual((await list(node, "", as(bo))).body.notifications.map(n => n.id), [bos.id])
  assert.equal((await streamEvents(t, `${node.http}/api/notifications/stream?user=${ana}`, as(bo))).res.status, 403)
  // Bo marking Ana's notification read changes nothing of hers.
  const res = await fetch(`${node.http}/api/notifications/read`, {
    method: "POST", headers: as(bo), body: JSON.stringify({ ids: [anas.id] }),
  })
  assert.deepEqual(await res.json(), { unread: 1 }, "Bo's own unread count")
  const anaList = await list(node, "", as(ana))
  assert.deepEqual([anaList.body.unread, anaList.body.notifications[0].read], [1, false])
  assert.ok(!anaStream.events.some(e => e.event === "read"), "no read event reached Ana")
})
