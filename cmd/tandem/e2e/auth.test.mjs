// End-to-end: a node started with --auth-secret admits stock clients that
// carry a token in the URL, and only to the documents the token allows.
import { test } from "node:test"
import assert from "node:assert/strict"
import { createHmac } from "node:crypto"
import { once } from "node:events"
import WebSocket from "ws"
import { defer, start, until } from "./server.mjs"
import { client, connected } from "./clients.mjs"

const secret = "an-e2e-secret-that-is-32-bytes!!"

// token signs HS256 claims, as an application's backend would.
function token(claims) {
  claims = { exp: Math.floor(Date.now() / 1000) + 3600, ...claims } // tokens must expire
  const b64 = v => Buffer.from(JSON.stringify(v)).toString("base64url")
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}`
  return `${body}.${createHmac("sha256", secret).update(body).digest("base64url")}`
}

async function errorsFor(node, reason) {
  const text = await (await fetch(`${node.http}/metrics`)).text()
  const line = text.split("\n").find(l => l.startsWith(`tandem_protocol_errors_total{reason="${reason}"}`))
  return line ? Number(line.split(" ")[1]) : 0
}

test("with auth: no token is refused, a token admits a stock client", async t => {
  const node = await start(t, { args: ["--auth-secret", secret] })
  const bare = new WebSocket(node.url)
  const [, res] = await once(bare, "unexpected-response")
  assert.equal(res.statusCode, 401)

  const all = { "*": "write" }
  const a = await connected(client(t, `${node.url}?token=${token({ sub: "ana", docs: all })}`))
  const handle = a.create({ title: "members only" })
  const b = client(t, `${node.url}?token=${token({ sub: "bo", docs: all })}`)
  assert.equal((await b.find(handle.url)).doc().title, "members only")
})

test("with auth: a document outside the token is unavailable; read-only changes stay local", async t => {
  const node = await start(t, { args: ["--auth-secret", secret] })
  const writer = await connected(client(t, `${node.url}?token=${token({ sub: "w", docs: { "*": "write" } })}`))
  const handle = writer.create({ title: "v1" })
  const id = handle.documentId

  const stranger = await connected(client(t, `${node.url}?token=${token({ sub: "s", docs: { "4NMNnkMhL8jXrdJ9jamS58PAVdXu": "write" } })}`))
  await assert.rejects(stranger.find(handle.url), /unavailable/)

  const reader = await connected(client(t, `${node.url}?token=${token({ sub: "r", docs: { [id]: "read" } })}`))
  const seen = await reader.find(handle.url)
  assert.equal(seen.doc().title, "v1")
  seen.change(d => { d.title = "defaced" })
  await until("the server refused the change", async () => await errorsFor(node, "read_only") >= 1)
  handle.change(d => { d.count = 1 })
  await until("the reader gets the writer's change", () => seen.doc().count === 1)
  const check = await connected(client(t, `${node.url}?token=${token({ sub: "c", docs: { "*": "read" } })}`))
  assert.equal((await check.find(handle.url)).doc().title, "v1")
  assert.equal(handle.doc().title, "v1")
})
