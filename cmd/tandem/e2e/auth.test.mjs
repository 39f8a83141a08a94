// End-to-end: a node started with --auth-secret admits stock clients that
// carry a token in the URL, and only to the documents the token allows.
import { test } from "node:test"
import assert from "node:assert/strict"
import { createHmac } from "node:crypto"
import { once } from "node:events"
import WebSocket from "ws"
import { Presence, cbor } from "@automerge/automerge-repo"
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

// A token fixes who a peer is in presence. A payload the stock client's
// CBOR decoder reads as presence, but that is not a plain map to the
// server (tag 55799 around it or around its key means nothing to
// cbor-x), would be relayed as an application's message and show its
// sender under any name: the server refuses it and tells the sender.
test("with auth: presence dressed in a CBOR tag cannot pass as another user", async t => {
  const node = await start(t, { args: ["--auth-secret", secret] })
  const ana = await connected(client(t, `${node.url}?token=${token({ sub: "ana", docs: { "*": "write" } })}`))
  const handle = ana.create({ text: "hi" })
  const presence = new Presence({ handle })
  presence.start({ initialState: { user: { id: "ana", name: "Ana" } } })
  defer(t, () => presence.stop())

  const ws = new WebSocket(`${node.url}?token=${token({ sub: "mallory", docs: { "*": "read" } })}`)
  defer(t, () => ws.close())
  const errors = []
  let server
  ws.on("message", data => {
    const m = cbor.decode(new Uint8Array(data))
    if (m.type === "peer") server = m.senderId
    if (m.type === "error") errors.push(m.message)
  })
  await once(ws, "open")
  ws.send(cbor.encode({ type: "join", senderId: "mallory-peer", peerMetadata: { isEphemeral: true }, supportedProtocolVersions: ["1"] }))
  await until("the server's peer message", () => server)
  const body = Buffer.from(cbor.encode({ __presence: { type: "snapshot", state: { user: { id: "ana", name: "Ana" }, cursor: 0 } } }))
  const key = body.subarray(body.indexOf(0x6a)) // the key "__presence" and its value, without the map's head
  const dressed = [
    Buffer.concat([Buffer.from([0xd9, 0xd9, 0xf7]), body]), // the map under tag 55799
    Buffer.concat([Buffer.from([0xa1, 0xd9, 0xd9, 0xf7]), key]), // its key under the tag
  ]
  for (const [i, data] of dressed.entries()) {
    assert.ok("__presence" in cbor.decode(data), "the stock decoder reads it as presence")
    ws.send(cbor.encode({ type: "ephemeral", senderId: "mallory-peer", targetId: server, documentId: handle.documentId, sessionId: "s", count: i + 1, data }))
  }
  await until("an error for each", () => errors.length === dressed.length)
  for (const e of errors) assert.match(e, /presence/)
  // An application message sent after them arrives, and the others never did.
  const heard = []
  handle.on("ephemeral-message", m => heard.push(m.message))
  ws.send(cbor.encode({ type: "ephemeral", senderId: "mallory-peer", targetId: server, documentId: handle.documentId, sessionId: "s", count: 3, data: cbor.encode({ hello: 1 }) }))
  await until("the application's message", () => heard.some(m => m.hello === 1))
  assert.deepEqual(heard.filter(m => "__presence" in m), [])
  assert.equal(presence.getPeerStates().value["mallory-peer"], undefined)
})
