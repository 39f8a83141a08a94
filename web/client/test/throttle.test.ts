import { test, mock } from "node:test"
import assert from "node:assert/strict"
import { Throttle } from "../src/throttle.js"

test("throttle sends the first value at once and then only the newest per interval", t => {
  mock.timers.enable({ apis: ["setTimeout"] })
  t.after(() => mock.timers.reset())
  const sent: number[] = []
  const th = new Throttle<number>(v => sent.push(v), 20) // 50 ms
  th.push(1)
  assert.deepEqual(sent, [1])
  th.push(2)
  th.push(3)
  th.push(4)
  assert.deepEqual(sent, [1])
  mock.timers.tick(49)
  assert.deepEqual(sent, [1])
  mock.timers.tick(1)
  assert.deepEqual(sent, [1, 4])
  // Still inside the next interval: held back, then the newest goes.
  th.push(5)
  th.push(6)
  mock.timers.tick(50)
  assert.deepEqual(sent, [1, 4, 6])
  // A quiet interval passes: the next value goes at once again.
  mock.timers.tick(50)
  th.push(7)
  assert.deepEqual(sent, [1, 4, 6, 7])
})

test("throttle never exceeds its rate under a flood", t => {
  mock.timers.enable({ apis: ["setTimeout"] })
  t.after(() => mock.timers.reset())
  const sent: number[] = []
  const th = new Throttle<number>(v => sent.push(v), 20)
  for (let ms = 0; ms < 1000; ms++) {
    th.push(ms)
    mock.timers.tick(1)
  }
  mock.timers.tick(100)
  assert.ok(sent.length <= 21, `sent ${sent.length} in 1 s`)
  assert.equal(sent.at(-1), 999) // the final value always arrives
  for (let i = 1; i < sent.length; i++) assert.ok(sent[i] > sent[i - 1]) // never older after newer
})

test("throttle cancel drops the pending value", t => {
  mock.timers.enable({ apis: ["setTimeout"] })
  t.after(() => mock.timers.reset())
  const sent: number[] = []
  const th = new Throttle<number>(v => sent.push(v), 10)
  th.push(1)
  th.push(2)
  th.cancel()
  mock.timers.tick(1000)
  assert.deepEqual(sent, [1])
})
