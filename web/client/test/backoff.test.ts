import { test } from "node:test"
import assert from "node:assert/strict"
import { backoffDelay, jittered } from "../src/backoff.js"

test("backoff ceilings double per attempt up to the maximum", () => {
  const top = () => 0.999999
  assert.equal(backoffDelay(0, { baseMs: 100, maxMs: 1000 }, top), 99)
  assert.equal(backoffDelay(1, { baseMs: 100, maxMs: 1000 }, top), 199)
  assert.equal(backoffDelay(3, { baseMs: 100, maxMs: 1000 }, top), 799)
  assert.equal(backoffDelay(4, { baseMs: 100, maxMs: 1000 }, top), 999)
  assert.equal(backoffDelay(500, { baseMs: 100, maxMs: 1000 }, top), 999)
  assert.equal(backoffDelay(7, { baseMs: 100, maxMs: 1000 }, () => 0), 0)
})

test("backoff is fully jittered: delays of many clients spread over the whole window", () => {
  const delays = Array.from({ length: 2000 }, () => backoffDelay(2, { baseMs: 1000, maxMs: 60_000 }))
  assert.ok(delays.every(d => d >= 0 && d < 4000))
  const quarters = [0, 0, 0, 0]
  for (const d of delays) quarters[Math.floor(d / 1000)]++
  for (const q of quarters) assert.ok(q > 300, `quarters ${quarters}`) // ~500 each
})

test("jittered periods stay within the spread and differ between clients", () => {
  const periods = Array.from({ length: 500 }, () => jittered(5000, 0.2))
  assert.ok(periods.every(p => p >= 4000 && p <= 6000))
  assert.ok(new Set(periods).size > 100)
  assert.equal(jittered(5000, 0.2, () => 0), 4000)
  assert.equal(jittered(5000, 0.2, () => 1), 6000)
})

test("a retry schedule keeps one attempt pending, grows its delays and starts over on reset", async () => {
  const { RetrySchedule } = await import("../src/backoff.js")
  const r = new RetrySchedule({ baseMs: 1, maxMs: 1000 })
  let ran = 0
  const ceilings: number[] = []
  for (let i = 0; i < 6; i++) ceilings.push(r.schedule(() => ran++))
  r.cancel()
  await new Promise(res => setTimeout(res, 80))
  assert.equal(ran, 0, "a replaced or cancelled attempt ran")
  assert.ok(ceilings.every((d, i) => d < 2 ** i), `delays ${ceilings}`)
  r.reset()
  const first = r.schedule(() => ran++)
  assert.ok(first < 1, `the delay after reset was ${first}`)
  await new Promise(res => setTimeout(res, 20))
  assert.equal(ran, 1)
})
