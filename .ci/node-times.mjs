// A node --test reporter that prints nothing: with $TANDEM_TIMES set, it
// appends each test file's time there as
// "node<TAB>file<TAB>seconds<TAB>ok|FAIL", for the table of times
// .ci/run prints. A file's time is its run as node reports it, or where
// node reports none, the sum of its top-level tests.
import { appendFileSync } from "node:fs"
import { relative } from "node:path"

export default async function* nodeTimes(source) {
  const whole = new Map() // file → ms, the file's own run
  const summed = new Map() // file → ms, its top-level tests added up
  const failed = new Set()
  for await (const { type, data } of source) {
    const file = data?.file
    if (!file) continue
    if (type === "test:fail") failed.add(file)
    const ms = data.details?.duration_ms
    if (data.nesting !== 0 || typeof ms !== "number") continue
    if (data.name === file) whole.set(file, Math.max(whole.get(file) ?? 0, ms))
    else if (type === "test:pass" || type === "test:fail") summed.set(file, (summed.get(file) ?? 0) + ms)
  }
  const out = process.env.TANDEM_TIMES
  if (!out) return
  let lines = ""
  for (const file of new Set([...whole.keys(), ...summed.keys()])) {
    const s = (whole.get(file) ?? summed.get(file)) / 1000
    lines += `node\t${relative(process.cwd(), file)}\t${s.toFixed(3)}\t${failed.has(file) ? "FAIL" : "ok"}\n`
  }
  appendFileSync(out, lines)
}
