// Helpers for the webhook end-to-end tests: a receiver that verifies
// every delivery with svix (a Standard Webhooks implementation we did not
// write), the tokens the tests' clients connect with, and a cluster of
// three nodes with stock clients in it.
import { createHash, createHmac, randomUUID } from "node:crypto"
import { createServer } from "node:http"
import { Presence } from "@automerge/automerge-repo"
import * as A from "@automerge/automerge"
import { Webhook } from "svix"
import { defer, psql, start, startRedis, postgresURL, until } from "./server.mjs"
import { client, connected } from "./clients.mjs"

export const authSecret = "an-e2e-secret-that-is-32-bytes!!"

// token is a JWT the nodes started with --auth-secret authSecret accept.
export function token(claims) {
  claims = { exp: Math.floor(Date.now() / 1000) + 3600, docs: { "*": "write" }, ...claims }
  const b64 = v => Buffer.from(JSON.stringify(v)).toString("base64url")
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}`
  return `${body}.${createHmac("sha256", authSecret).update(body).digest("base64url")}`
}

// receiver is an endpoint that verifies each delivery with svix. While
// down it answers 503 and notes the attempt's type; up, it keeps each
// event by its webhook-id, and every delivery, repeats included, in
// received. delay makes it answer that many milliseconds late (a slow
// endpoint). close() stops listening and drops every connection (a
// closed port: the endpoint is down); open() listens on the same port
// again.
export async function receiver(t, secret) {
  const wh = new Webhook(secret)
  const r = { down: false, delay: 0, attempts: [], events: new Map(), received: [], bad: 0, deliveries: 0 }
  const srv = createServer((req, res) => {
    let body = ""
    req.setEncoding("utf8")
    req.on("data", c => { body += c })
    req.on("end", () => {
      const answer = () => {
        try {
          wh.verify(body, req.headers)
        } catch {
          r.bad++
          res.writeHead(400).end()
          return
        }
        const e = JSON.parse(body)
        if (r.down) {
          r.attempts.push(e.type)
          res.writeHead(503).end()
          return
        }
        const id = req.headers["webhook-id"]
        r.deliveries++
        r.received.push({ id, event: e, at: Date.now() })
        r.events.set(id, e)
        res.writeHead(204).end()
      }
      if (r.delay > 0) {
        const timer = setTimeout(answer, r.delay)
        res.on("close", () => clearTimeout(timer)) // the sender gave up
      } else answer()
    })
  })
  let port = 0
  r.open = async () => {
    await new Promise((ok, fail) => {
      srv.once("error", fail)
      srv.listen(port, "127.0.0.1", () => { srv.off("error", fail); ok() })
    })
    port = srv.address().port
  }
  r.close = async () => {
    const closed = new Promise(ok => srv.close(ok))
    srv.closeAllConnections()
    await closed
  }
  await r.open()
  defer(t, () => srv.listening && r.close())
  r.url = `http://127.0.0.1:${port}/hooks`
  r.ofType = type => [...r.events.values()].filter(e => e.type === type)
  // The deliveries to this endpoint not yet done, in a cluster's
  // PostgreSQL: its River queue is named by its URL's hash.
  r.waiting = () => psql(`SELECT COUNT(*) FROM river_job WHERE queue = 'tandem_webhook_${
    createHash("sha256").update(r.url).digest("hex").slice(0, 12)}' AND state <> 'completed'`)
  return r
}

// run tells this test process's users and nodes from those of others.
export const run = randomUUID().slice(0, 8)

// cluster starts a Redis of its own and three nodes on it and the test
// PostgreSQL, each sending webhooks to urls.
export async function cluster(t, name, urls, secret, extra = []) {
  const redis = await startRedis(t)
  const args = ["--redis-url", redis.url, "--postgres-url", postgresURL, "--auth-secret", authSecret,
    ...urls.flatMap(u => ["--webhook-url", u]), "--webhook-secret", secret,
    "--webhook-debounce", "1s", "--webhook-max-wait", "5s", ...extra]
  const nodes = []
  for (let i = 1; i <= 3; i++) nodes.push(await start(t, { args: [...args, "--node-id", `${name}${i}-${run}`] }))
  return { redis, args, nodes }
}

// tab opens a document in a stock client of its own on node, as user,
// and starts its Presence; without url it creates the document.
export async function tab(t, node, user, url) {
  const repo = await connected(client(t, `${node.url}?token=${token({ sub: user })}`))
  const handle = url ? await repo.find(url) : repo.create({ text: "" })
  // A Presence started in the tick that creates the document is seen by
  // the node only at its next heartbeat (15 s): start it once the cluster
  // holds the document.
  if (!url) await until("the document created", () => psql(`SELECT COUNT(*) FROM tandem_webhook_documents WHERE document = '${handle.documentId}'`) === "1", 10000)
  const presence = new Presence({ handle })
  presence.start({ initialState: { user: { id: user, name: user } } })
  defer(t, () => presence.running && presence.stop())
  return {
    repo, handle, presence,
    close() {
      if (presence.running) presence.stop()
      return repo.close()
    },
  }
}

export const type = (handle, s) => handle.change(d => A.splice(d, ["text"], d.text.length, 0, s))
export const heads = handle => [...A.getHeads(handle.doc())].sort()

// present counts the presence rows the webhooks mirror of a user in a
// document ("" for its status).
export const present = (user, doc) => Number(psql(`SELECT COUNT(*) FROM tandem_webhook_present WHERE user_id = '${user}' AND doc = '${doc}'`))
export const windowOpen = doc => psql(`SELECT COUNT(*) FROM tandem_webhook_windows WHERE document = '${doc}'`) !== "0"

// roundTrip is how long an edit made in from takes to reach to, in ms.
export async function roundTrip(from, to, mark) {
  const t0 = performance.now()
  type(from, mark)
  await until(`${mark} to arrive`, () => to.doc().text.includes(mark), 10000)
  return performance.now() - t0
}

// presenceTrip is how long a presence value broadcast by from takes to
// reach to's Presence, in ms.
export async function presenceTrip(from, to, value) {
  let got = false
  const on = ({ channel, value: v }) => { if (channel === "cursor" && v === value) got = true }
  to.presence.on("update", on)
  const t0 = performance.now()
  from.presence.broadcast("cursor", value)
  await until(`cursor ${value} to arrive`, () => got, 10000)
  to.presence.off("update", on)
  return performance.now() - t0
}

// sequences groups a receiver's distinct events (by webhook-id) of the
// given types by key, each group ordered by when it happened.
export function sequences(hooks, types, key) {
  const out = new Map()
  for (const e of hooks.events.values()) {
    if (!types.includes(e.type)) continue
    const k = key(e)
    if (!out.has(k)) out.set(k, [])
    out.get(k).push(e)
  }
  for (const l of out.values()) l.sort((a, b) => (a.data.at - b.data.at) || (a.type === b.type ? 0 : a.type.endsWith("entered") ? -1 : 1))
  return out
}

// repeats counts the deliveries of a webhook-id past its first: what
// at-least-once allows.
export function repeats(hooks) {
  const n = new Map()
  for (const { id } of hooks.received) n.set(id, (n.get(id) ?? 0) + 1)
  return [...n].filter(([, c]) => c > 1).map(([id, c]) => ({ id, type: hooks.events.get(id).type, times: c }))
}
