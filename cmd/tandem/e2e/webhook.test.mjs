// End-to-end: webhooks. A receiver that verifies every delivery with svix
// (a Standard Webhooks implementation) is down while a stock client
// creates and edits a document, is present in it and leaves, and a
// notification is posted; once it is back it gets every event. Two nodes
// over a real Redis and PostgreSQL tell one edit of both once.
import { test } from "node:test"
import assert from "node:assert/strict"
import { randomBytes, randomUUID } from "node:crypto"
import { Presence } from "@automerge/automerge-repo"
import * as A from "@automerge/automerge"
import { defer, start, startRedis, postgresURL, psql, until } from "./server.mjs"
import { client, connected } from "./clients.mjs"
import { authSecret, receiver, token } from "./hooks.mjs"

const run = randomUUID().slice(0, 8)
const user = name => `${name}-${run}`

test("a receiver down for a while gets every event, each signed as svix verifies", async t => {
  const secret = "whsec_" + randomBytes(32).toString("base64")
  const hooks = await receiver(t, secret)
  hooks.down = true
  const node = await start(t, {
    args: ["--auth-secret", authSecret, "--notify-window", "200ms",
      "--webhook-url", hooks.url, "--webhook-secret", secret,
      "--webhook-debounce", "300ms", "--webhook-max-wait", "1s"],
  })
  const ana = user("ana")
  const repo = await connected(client(t, `${node.url}?token=${token({ sub: ana })}`))
  const handle = repo.create({ text: "" })
  handle.change(d => A.splice(d, ["text"], 0, 0, "Roadmap"))
  const presence = new Presence({ handle })
  presence.start({ initialState: { user: { id: ana } } })
  await until("presence.entered tried", () => hooks.attempts.includes("presence.entered"), 20000)
  for (const ch of " for Q3") handle.change(d => A.splice(d, ["text"], d.text.length, 0, ch))
  const posted = await fetch(`${node.http}/api/notifications`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token({ sub: ana })}` },
    body: JSON.stringify({ recipient: ana, kind: "reminder", actor: ana, document: handle.documentId }),
  })
  assert.equal(posted.status, 202)
  await until("document.changed and notification.created tried",
    () => hooks.attempts.includes("document.changed") && hooks.attempts.includes("notification.created"), 20000)
  presence.stop()
  repo.close()
  await until("presence.left tried", () => hooks.attempts.includes("presence.left"), 30000)

  hooks.down = false // back: the retries bring everything
  const want = ["document.created", "document.changed", "presence.entered", "presence.left", "notification.created"]
  await until("every event once the receiver is back", () => {
    const statuses = hooks.ofType("user.status").map(e => e.data.status)
    return want.every(type => hooks.ofType(type).length > 0) && statuses.includes("online") && statuses.includes("offline")
  }, 90000)
  assert.equal(hooks.bad, 0, "every delivery verified")

  const [created] = hooks.ofType("document.created")
  assert.deepEqual(created.data, { documentId: handle.documentId, users: [ana] })
  const changed = hooks.ofType("document.changed").filter(e => e.data.documentId === handle.documentId)
  assert.ok(changed.every(e => e.data.users.includes(ana) && e.data.heads.length > 0), JSON.stringify(changed))
  // Retries deliver in any order: the latest window is the one whose
  // last change is latest.
  const latest = changed.reduce((a, b) => (b.data.lastChangeAt > a.data.lastChangeAt ? b : a))
  assert.deepEqual(latest.data.heads, A.getHeads(handle.doc()), "the latest window names the document's heads")
  assert.deepEqual(hooks.ofType("presence.entered").map(e => [e.data.documentId, e.data.userId]), [[handle.documentId, ana]])
  assert.deepEqual(hooks.ofType("presence.left").map(e => [e.data.documentId, e.data.userId]), [[handle.documentId, ana]])
  assert.deepEqual(hooks.ofType("user.status").map(e => e.data.status).sort(), ["offline", "online"])
  const [n] = hooks.ofType("notification.created")
  assert.deepEqual([n.data.notification.recipient, n.data.notification.kind], [ana, "reminder"])
})

test("one edit on two nodes within the debounce is one document.changed", async t => {
  const secret = "whsec_" + randomBytes(32).toString("base64")
  const hooks = await receiver(t, secret)
  const redis = await startRedis(t)
  const args = ["--redis-url", redis.url, "--postgres-url", postgresURL, "--auth-secret", authSecret,
    "--webhook-url", hooks.url, "--webhook-secret", secret, "--webhook-events", "document.changed",
    "--webhook-debounce", "1s", "--webhook-max-wait", "5s"]
  const n1 = await start(t, { args: [...args, "--node-id", "w1"] })
  const n2 = await start(t, { args: [...args, "--node-id", "w2"] })
  const a = await connected(client(t, `${n1.url}?token=${token({ sub: user("ana") })}`))
  const ha = a.create({ text: "" })
  const b = await connected(client(t, `${n2.url}?token=${token({ sub: user("bo") })}`))
  const hb = await b.find(ha.url)
  ha.change(d => A.splice(d, ["text"], 0, 0, "a"))
  hb.change(d => A.splice(d, ["text"], 0, 0, "b"))
  const doc = ha.documentId
  await until("both edits on both nodes", () => ha.doc().text.length === 2 && hb.doc().text.length === 2, 10000)
  await until("document.changed naming both users", () =>
    hooks.ofType("document.changed").some(e => e.data.documentId === doc && e.data.users.length === 2), 20000)
  // Nothing more to come: no window open for the document, no delivery
  // waiting.
  await until("the windows closed and the deliveries done", () =>
    psql(`SELECT COUNT(*) FROM tandem_webhook_windows WHERE document = '${doc}'`) === "0" && hooks.waiting() === "0", 20000)
  const first = hooks.ofType("document.changed").filter(e => e.data.documentId === doc)
  assert.equal(first.length, 1, JSON.stringify(first))
  assert.deepEqual(first[0].data.users, [user("ana"), user("bo")].sort())
  assert.equal(hooks.bad, 0)
})

test("a user's tabs on two nodes enter once and leave once", async t => {
  const secret = "whsec_" + randomBytes(32).toString("base64")
  const hooks = await receiver(t, secret)
  const redis = await startRedis(t)
  const args = ["--redis-url", redis.url, "--postgres-url", postgresURL, "--auth-secret", authSecret,
    "--webhook-url", hooks.url, "--webhook-secret", secret, "--webhook-events", "presence.entered,presence.left"]
  const n1 = await start(t, { args: [...args, "--node-id", "p1"] })
  const n2 = await start(t, { args: [...args, "--node-id", "p2"] })
  const cy = user("cy")
  const tab = async (node, handleUrl) => {
    const repo = await connected(client(t, `${node.url}?token=${token({ sub: cy })}`))
    const handle = handleUrl ? await repo.find(handleUrl) : repo.create({ text: "" })
    const presence = new Presence({ handle })
    presence.start({ initialState: { user: { id: cy } } })
    defer(t, () => presence.running && presence.stop())
    return { repo, handle, presence }
  }
  const rows = doc => psql(`SELECT COUNT(*) FROM tandem_webhook_present WHERE doc = '${doc}' AND user_id = '${cy}'`)
  const one = await tab(n1)
  const doc = one.handle.documentId
  const two = await tab(n2, one.handle.url)
  await until("both tabs mirrored", () => rows(doc) === "2", 20000)
  await until("presence.entered", () => hooks.ofType("presence.entered").length > 0, 20000)
  one.presence.stop()
  one.repo.close()
  // The tab's end is applied, in the transaction that would have made
  // presence.left: the other tab stays, so none is made.
  await until("the first tab's end mirrored", () => rows(doc) === "1", 20000)
  two.presence.stop()
  two.repo.close()
  await until("presence.left", () => hooks.ofType("presence.left").length > 0, 20000)
  await until("the deliveries done", () => hooks.waiting() === "0", 20000)
  const of = type => hooks.ofType(type).filter(e => e.data.documentId === doc).map(e => e.data.userId)
  assert.deepEqual(of("presence.entered"), [cy])
  assert.deepEqual(of("presence.left"), [cy])
  assert.equal(hooks.bad, 0)
})
