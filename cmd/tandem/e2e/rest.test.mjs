// End-to-end: a backend reads and edits documents over REST beside stock
// automerge-repo clients: an edit made over REST reaches a client live, a
// client's edit shows in the next REST read, on one node and across
// nodes, a document made over REST is
// found by a client, changes a backend made with its own automerge reach
// the clients, and a mention written over REST notifies as a typed one.
import { test } from "node:test"
import assert from "node:assert/strict"
import { createHmac, randomUUID } from "node:crypto"
import * as A from "@automerge/automerge"
import { start, startRedis, postgresURL, until } from "./server.mjs"
import { client, connected, streamEvents } from "./clients.mjs"

const secret = "an-e2e-secret-that-is-32-bytes!!"

// token signs HS256 claims, as an application's backend would.
function token(claims) {
  const enc = o => Buffer.from(JSON.stringify(o)).toString("base64url")
  const body = `${enc({ alg: "HS256", typ: "JWT" })}.${enc({ exp: Math.floor(Date.now() / 1000) + 3600, ...claims })}`
  return `${body}.${createHmac("sha256", secret).update(body).digest("base64url")}`
}

async function api(node, method, path, { body, tok, type = "application/json" } = {}) {
  const headers = {}
  if (tok) headers.authorization = `Bearer ${tok}`
  if (body !== undefined) headers["content-type"] = type
  const res = await fetch(`${node.http}/api${path}`, {
    method, headers,
    body: body === undefined ? undefined : type === "application/json" ? JSON.stringify(body) : body,
  })
  const ct = res.headers.get("content-type") ?? ""
  return { status: res.status, headers: res.headers, body: ct.includes("json") ? await res.json() : new Uint8Array(await res.arrayBuffer()) }
}

test("a REST edit reaches a stock client live, and a REST read matches what the client holds", async t => {
  const node = await start(t)
  const repo = await connected(client(t, node.url))
  const handle = repo.create({ text: "hello", n: 1 })
  await until("the document on the server", async () => (await api(node, "GET", `/docs/${handle.documentId}`)).status === 200)

  const res = await api(node, "PATCH", `/docs/${handle.documentId}`, {
    body: [{ op: "splice", path: ["text"], index: 5, delete: 0, insert: " world 👋" }, { op: "put", path: ["n"], value: 2 }],
  })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  await until("the REST edit on the client", () => handle.doc().text === "hello world 👋" && handle.doc().n === 2)

  // The client types after the emoji (UTF-16 indices on both sides).
  handle.change(d => A.splice(d, ["text"], handle.doc().text.length, 0, "!"))
  await until("the client's edit in a REST read", async () => {
    const got = await api(node, "GET", `/docs/${handle.documentId}`)
    return JSON.stringify(got.body.doc) === JSON.stringify(A.toJS(handle.doc()))
  })
  const got = await api(node, "GET", `/docs/${handle.documentId}`)
  assert.deepEqual(got.body.heads.slice().sort(), A.getHeads(handle.doc()).slice().sort())
  // The same edit again, at the index counted in UTF-16 code units.
  const at = handle.doc().text.length
  assert.equal((await api(node, "PATCH", `/docs/${handle.documentId}`, { body: [{ op: "splice", path: ["text"], index: at, insert: "?" }] })).status, 200)
  await until("the second REST edit on the client", () => handle.doc().text === "hello world 👋!?")

  // The saved document and the changes load in the client's automerge.
  const saved = await api(node, "GET", `/docs/${handle.documentId}/saved`)
  assert.equal(saved.status, 200)
  assert.deepEqual(A.toJS(A.load(saved.body)), A.toJS(handle.doc()))
  const changes = await api(node, "GET", `/docs/${handle.documentId}/changes`)
  assert.deepEqual(A.toJS(A.loadIncremental(A.init(), changes.body)), A.toJS(handle.doc()))
})

test("a REST edit on one node reaches a stock client on another", async t => {
  const redis = await startRedis(t)
  const nodes = []
  for (const i of [1, 2]) {
    nodes.push(await start(t, { args: ["--redis-url", redis.url, "--postgres-url", postgresURL, "--node-id", `rest-n${i}-${randomUUID().slice(0, 6)}`] }))
  }
  const repo = await connected(client(t, nodes[1].url))
  const handle = repo.create({ text: "two nodes" })
  await until("the document on the first node", async () => (await api(nodes[0], "GET", `/docs/${handle.documentId}`)).status === 200, 20000)
  const res = await api(nodes[0], "PATCH", `/docs/${handle.documentId}`, { body: [{ op: "splice", path: ["text"], index: 0, insert: "over " }] })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  await until("the first node's REST edit on the second node's client", () => handle.doc().text === "over two nodes", 20000)
})

test("a document made over REST is found by a stock client, and a backend's own changes reach it", async t => {
  const node = await start(t)
  const made = await api(node, "POST", "/docs", { body: { title: "Roadmap", items: [1, { done: false }] } })
  assert.equal(made.status, 201, JSON.stringify(made.body))
  assert.equal(made.body.url, `automerge:${made.body.documentId}`)
  const repo = await connected(client(t, node.url))
  const handle = await repo.find(made.body.url)
  assert.deepEqual(A.toJS(handle.doc()), { title: "Roadmap", items: [1, { done: false }] })
  // Strings are collaborative text, as repo.create makes them.
  handle.change(d => A.splice(d, ["title"], 0, 0, "Q3 "))

  // A backend running automerge: the changes, one of its own, posted back.
  const since = await api(node, "GET", `/docs/${made.body.documentId}/changes`)
  let mine = A.loadIncremental(A.init(), since.body)
  const before = A.getHeads(mine)
  mine = A.change(mine, d => { d.items.push("from the backend") })
  const post = await api(node, "POST", `/docs/${made.body.documentId}/changes`, {
    body: Buffer.concat(A.getChanges(A.view(mine, before), mine).map(c => Buffer.from(c))), type: "application/octet-stream",
  })
  assert.equal(post.status, 200, JSON.stringify(post.body))
  await until("the backend's change on the client", () => handle.doc().items.length === 3)
  await until("both edits in a REST read", async () => {
    const got = await api(node, "GET", `/docs/${made.body.documentId}`)
    return got.body.doc.title === "Q3 Roadmap" && got.body.doc.items.length === 3
  })
})

test("an empty document made over REST is found by a stock client, and a counter made over REST counts its increments", async t => {
  const node = await start(t)
  const made = await api(node, "POST", "/docs", { body: {} })
  assert.equal(made.status, 201, JSON.stringify(made.body))
  const repo = await connected(client(t, node.url))
  const handle = await repo.find(made.body.url)
  assert.deepEqual(A.toJS(handle.doc()), {})
  const put = await api(node, "PATCH", `/docs/${made.body.documentId}`,
    { body: [{ op: "put", path: ["votes"], value: 1, type: "counter" }] })
  assert.equal(put.status, 200, JSON.stringify(put.body))
  await until("the counter on the client", () => handle.doc().votes !== undefined)
  assert.ok(handle.doc().votes instanceof A.Counter, "a counter, not a number")
  handle.change(d => d.votes.increment(2))
  const inc = await api(node, "PATCH", `/docs/${made.body.documentId}`, { body: [{ op: "increment", path: ["votes"], value: 3 }] })
  assert.equal(inc.status, 200, JSON.stringify(inc.body))
  await until("both increments on the client", () => handle.doc().votes.value === 6)
  await until("both increments in a REST read", async () =>
    (await api(node, "GET", `/docs/${made.body.documentId}`)).body.doc.votes === 6)
})

test("a mention written over REST notifies the mentioned user, as the token's user", async t => {
  const node = await start(t, { args: ["--auth-secret", secret, "--notify-window", "300ms"] })
  const run = randomUUID().slice(0, 8)
  const [ana, bo] = [`ana-${run}`, `bo-${run}`]
  const anaTok = token({ sub: ana, name: "Ana", docs: { "*": "write" } })
  const stream = await streamEvents(t, `${node.http}/api/notifications/stream`, { authorization: `Bearer ${token({ sub: bo, docs: { "*": "read" } })}` })
  assert.equal(stream.res.status, 200)
  const made = await api(node, "POST", "/docs", { tok: anaTok, body: { text: "Roadmap\n" } })
  assert.equal(made.status, 201, JSON.stringify(made.body))
  const res = await api(node, "PATCH", `/docs/${made.body.documentId}`, {
    tok: anaTok, body: [{ op: "splice", path: ["text"], index: 8, insert: `hi @${bo} ` }],
  })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  await until("Bo's notification", () => stream.events.some(e => e.event === "notification"), 20000)
  const n = stream.events.find(e => e.event === "notification").data.notification
  assert.deepEqual([n.kind, n.document, n.recipient], ["mention", made.body.documentId, bo])
  assert.equal(n.text, "Ana mentioned you in Roadmap")
})
