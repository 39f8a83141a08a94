// End-to-end: stock automerge-repo 2.5.x clients sync through the real
// tandem binary, with no change to the client.
import { test } from "node:test"
import assert from "node:assert/strict"
import * as A from "@automerge/automerge"
import { defer, start, until } from "./server.mjs"
import { client, connected } from "./clients.mjs"

test("client A creates, client B finds", async t => {
  const node = await start(t)
  const a = await connected(client(t, node.url))
  const handle = a.create({ title: "Roadmap", items: ["sync"] })
  const b = client(t, node.url)
  const found = await b.find(handle.url)
  assert.deepEqual(found.doc(), { title: "Roadmap", items: ["sync"] })
})

test("concurrent edits from both clients converge", async t => {
  const node = await start(t)
  const a = await connected(client(t, node.url))
  const ha = a.create({ text: "middle" })
  const b = client(t, node.url)
  const hb = await b.find(ha.url)
  // Both edit at once, without waiting for each other.
  for (let i = 0; i < 20; i++) {
    ha.change(d => A.splice(d, ["text"], 0, 0, "a"))
    hb.change(d => A.splice(d, ["text"], hb.doc().text.length, 0, "b"))
  }
  const want = "a".repeat(20) + "middle" + "b".repeat(20)
  await until("both converge", () => ha.doc().text === want && hb.doc().text === want)
})

test("a paste of 1 MiB in one change is taken, stored and found, after a restart too", async t => {
  const node = await start(t)
  const a = await connected(client(t, node.url))
  const text = "lorem ipsum dolor sit amet, ".repeat(40000).slice(0, 1 << 20)
  const handle = a.create({ text })
  const b = client(t, node.url)
  const found = await b.find(handle.url)
  await until("b holds the whole paste", () => found.doc().text?.length === text.length)
  assert.equal(found.doc().text, text)
  a.close()
  b.close()
  await node.kill("SIGTERM")
  const again = await start(t, { dataDir: node.dataDir })
  const c = client(t, again.url)
  const cold = await c.find(handle.url)
  assert.equal(cold.doc().text, text)
})

test("a new reader of a large document is sent it saved, and holds it all", async t => {
  const node = await start(t)
  const a = await connected(client(t, node.url))
  const handle = a.create({ text: "" })
  for (let i = 0; i < 1200; i++) handle.change(d => A.splice(d, ["text"], i, 0, "abc"[i % 3]))
  const saved = async () => {
    const text = await (await fetch(`${node.http}/metrics`)).text()
    return /tandem_document_saves_total\{outcome="saved"\} [1-9]/.test(text)
  }
  await until("the server saved the document", saved)
  const b = client(t, node.url)
  const received = []
  b.networkSubsystem.on("message", m => {
    if (m.type === "sync" && m.documentId === handle.documentId) received.push(A.decodeSyncMessage(m.data))
  })
  const found = await b.find(handle.url)
  await until("b holds the whole text", () => found.doc().text === handle.doc().text)
  const withChanges = received.filter(m => m.changes.length > 0)
  const changeBytes = A.getAllChanges(handle.doc()).reduce((n, c) => n + c.length, 0)
  assert.equal(withChanges[0].changes.length, 1, "the document came in one entry")
  assert.ok(withChanges[0].changes[0].length < changeBytes / 10,
    `the entry is ${withChanges[0].changes[0].length} bytes, the changes ${changeBytes}: not the saved document`)
})

test("an edit survives SIGKILL 1.5 s after it was made", async t => {
  const first = await start(t)
  const a = await connected(client(t, first.url))
  const handle = a.create({ count: 0 })
  handle.change(d => { d.count = 42; d.note = "written just before the crash" })
  const editedAt = Date.now()
  // Make sure the server has the edit (another client sees it), then kill
  // it 1.5 s after the edit, without any chance of a graceful flush.
  const witness = client(t, first.url)
  const seen = await witness.find(handle.url)
  await until("the witness sees the edit", () => seen.doc().count === 42)
  // The clients leave first: closing a socket makes the server write
  // nothing, and a stock client outliving its server keeps reconnecting.
  a.close()
  witness.close()
  await new Promise(r => setTimeout(r, Math.max(0, editedAt + 1500 - Date.now())))
  await first.kill("SIGKILL")

  const second = await start(t, { dataDir: first.dataDir })
  const fresh = client(t, second.url)
  const found = await fresh.find(handle.url)
  assert.equal(found.doc().count, 42)
  assert.equal(found.doc().note, "written just before the crash")
})

test("an ephemeral message from A reaches B and never A", async t => {
  const node = await start(t)
  const a = await connected(client(t, node.url))
  const ha = a.create({})
  const b = client(t, node.url)
  const hb = await b.find(ha.url)
  const atA = [], atB = []
  ha.on("ephemeral-message", e => atA.push(e.message))
  hb.on("ephemeral-message", e => atB.push(e.message))
  ha.broadcast({ hello: "from A" })
  await until("B receives A's message", () => atB.length > 0)
  assert.deepEqual(atB, [{ hello: "from A" }])
  // B answers; once A has B's answer, A's own message would have come first.
  hb.broadcast({ hello: "from B" })
  await until("A receives B's answer", () => atA.length > 0)
  assert.deepEqual(atA, [{ hello: "from B" }])
})

test("finding a never-created document reports it unavailable", async t => {
  const node = await start(t)
  const b = await connected(client(t, node.url))
  await assert.rejects(b.find("automerge:2gzyVEWRbEhwBcRvStKvD3gBE5pp"), /unavailable/)
})

test("a peer waiting on an unavailable document receives it once created", async t => {
  const node = await start(t)
  const b = await connected(client(t, node.url))
  const url = "automerge:4NMNnkMhL8jXrdJ9jamS58PAVdXu"
  await assert.rejects(b.find(url), /unavailable/)
  const waiting = b.findWithProgress(url).handle

  const a = await connected(client(t, node.url))
  const source = A.change(A.init(), d => { d.title = "appeared later" })
  a.import(A.save(source), { docId: "4NMNnkMhL8jXrdJ9jamS58PAVdXu" })
  await waiting.whenReady()
  assert.equal(waiting.doc().title, "appeared later")
})

test("typing with stock clients: all converge, and a reader gets at most one message per change the server applied", async t => {
  const node = await start(t)
  const typists = [], readers = []
  for (let i = 0; i < 3; i++) typists.push(await connected(client(t, node.url)))
  for (let i = 0; i < 10; i++) readers.push(await connected(client(t, node.url)))
  const first = typists[0].create({ text: "" })
  const handles = [first]
  for (const r of [...typists.slice(1), ...readers]) handles.push(await r.find(first.url))
  const frames = readers.map(() => 0)
  readers.forEach((r, i) => r.networkSubsystem.on("message", m => { if (m.type === "sync") frames[i]++ }))
  const keystrokes = 20
  for (let k = 0; k < keystrokes; k++) {
    handles.slice(0, 3).forEach((h, i) => h.change(d => A.splice(d, ["text"], 0, 0, String(i))))
    await new Promise(r => setTimeout(r, 20)) // a typist's pace
  }
  const want = 3 * keystrokes
  await until("all converge", () => {
    const texts = handles.map(h => h.doc().text)
    return texts[0].length === want && texts.every(x => x === texts[0])
  }, 20000)
  // Each typist's client sends at most one message per keystroke, so the
  // server applies at most 3 × 20 changes: never more messages than that
  // to a reader, which acknowledges each (two per change before issue 16).
  for (const [i, n] of frames.entries()) assert.ok(n <= want, `reader ${i} got ${n} sync messages for ${want} changes`)
  console.log(`sync messages per reader for ${want} changes: ${frames.join(", ")}`)
})
