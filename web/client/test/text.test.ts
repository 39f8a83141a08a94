import { test } from "node:test"
import assert from "node:assert/strict"
import * as A from "@automerge/automerge"
import { Repo } from "@automerge/automerge-repo"
import type { DocHandle } from "@automerge/automerge-repo"
import { spliceText } from "../src/text.js"
import { pair } from "./pair.js"

type TextDoc = { text: string }

// opsOfChangesSince returns the operations of each change made after the
// document had `before` changes.
function opsOfChangesSince(handle: DocHandle<TextDoc>, before: number): number[] {
  return A.getAllChanges(handle.doc()!).slice(before).map(c => A.decodeChange(c).ops.length)
}

async function until(what: string, cond: () => boolean) {
  const deadline = Date.now() + 10_000
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`never: ${what}`)
    await new Promise(r => setTimeout(r, 5))
  }
}

test("a paste larger than the bound goes in as several changes, each in a sync message of its own", async t => {
  const [client, server] = pair("server-storage")
  t.after(() => Promise.all([client.shutdown(), server.shutdown()]))
  const handle = client.create<TextDoc>({ text: "[]" })
  const remote = await server.find<TextDoc>(handle.url)
  await until("the server has the document", () => remote.doc()?.text === "[]")
  const before = A.getAllChanges(handle.doc()!).length
  // The server applies each sync message at once: what one brings shows
  // as one change event.
  const lengths: number[] = []
  remote.on("change", ({ doc }) => lengths.push(doc.text.length))

  const paste = "a".repeat(50_000) + "b".repeat(50_000) + "c".repeat(20_000)
  await spliceText(handle, ["text"], 1, 0, paste, { maxChars: 50_000 })
  assert.deepEqual(opsOfChangesSince(handle, before), [50_000, 50_000, 20_000], "one change per part")
  await until("the server has the paste", () => remote.doc()?.text === `[${paste}]`)
  const steps = lengths.map((n, i) => n - (i === 0 ? 2 : lengths[i - 1]))
  assert.ok(steps.every(n => n <= 50_000), `the server took ${steps} characters at a time`)
})

test("each part follows the one before it, whatever is typed meanwhile; deletions are parts too", async () => {
  const repo = new Repo()
  const handle = repo.create<TextDoc>({ text: "[" + "x".repeat(12) + "]" })
  const before = A.getAllChanges(handle.doc()!).length
  const acks: number[] = []
  await spliceText(handle, ["text"], 1, 12, "aaaaabbbbbcc", {
    maxChars: 5,
    acknowledged: async h => {
      acks.push(A.getAllChanges(h.doc()!).length - before)
      if (acks.length === 1) h.change(d => A.splice(d as TextDoc, ["text"], 0, 0, "typed "))
    },
  })
  assert.equal(handle.doc()!.text, "typed [aaaaabbbbbcc]")
  const ops = opsOfChangesSince(handle, before)
  ops.splice(1, 1) // the edit typed meanwhile
  assert.deepEqual(ops, [5, 5, 5, 5, 4], "12 deleted and 12 inserted, at most 5 a change")
  assert.deepEqual(acks, [1, 3, 4, 5], "each part waits for the one before it to be acknowledged")
  await repo.shutdown()
})

test("a wait the server will never end is ended by the signal", async () => {
  const repo = new Repo()
  const handle = repo.create<TextDoc>({ text: "" })
  const refused = new AbortController()
  const done = spliceText(handle, ["text"], 0, 0, "abcdefghij", {
    maxChars: 5,
    acknowledged: () => new Promise(() => {}), // the server refused the document: no acknowledgement comes
    signal: refused.signal,
  })
  refused.abort(new Error("document refused"))
  await assert.rejects(done, /document refused/)
  assert.equal(handle.doc()!.text, "abcde", "the part after the refusal is not made")
  await repo.shutdown()
})

test("a small edit is one change, made at once", async () => {
  const repo = new Repo()
  const handle = repo.create<TextDoc>({ text: "hello" })
  let acked = false
  const done = spliceText(handle, ["text"], 5, 0, " world", { acknowledged: async () => void (acked = true) })
  assert.equal(handle.doc()!.text, "hello world", "made before the promise resolves")
  await done
  assert.equal(acked, false)
  await repo.shutdown()
})

test("the demo editor hands a paste over the bound to spliceText and lets others through", async () => {
  const { EditorState } = await import("@codemirror/state")
  const { largeEdits } = await import("../../demo/large.js")
  const repo = new Repo()
  const handle = repo.create<TextDoc>({ text: "[]" })
  const before = A.getAllChanges(handle.doc()!).length
  let state = EditorState.create({ doc: "[]", extensions: largeEdits(handle as DocHandle<unknown>, ["text"], { acknowledged: async () => {}, maxChars: 50_000 }) })

  const small = state.update({ changes: { from: 1, insert: "typed" }, userEvent: "input.type" })
  assert.ok(small.docChanged, "a small edit goes to the editor (and the sync plugin) as it is")
  const remote = state.update({ changes: { from: 1, insert: "r".repeat(60_000) } })
  assert.ok(remote.docChanged, "a change from the document (no user event) goes to the editor as it is")

  const paste = "p".repeat(120_000)
  const tr = state.update({ changes: { from: 1, insert: paste }, userEvent: "input.paste" })
  assert.ok(!tr.docChanged, "the paste is kept from the sync plugin")
  state = tr.state
  await until("the paste is in the document", () => handle.doc()!.text === `[${paste}]`)
  assert.deepEqual(opsOfChangesSince(handle, before), [50_000, 50_000, 20_000])
  await repo.shutdown()
})
