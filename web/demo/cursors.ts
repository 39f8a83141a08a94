// Remote carets and selections for CodeMirror 6, drawn in each user's color.
import { StateEffect, StateField, type Extension, type Range } from "@codemirror/state"
import { Decoration, EditorView, WidgetType, type DecorationSet } from "@codemirror/view"

/** A remote peer's caret and selection, as indices into the editor's text. */
export interface RemoteCursor {
  peerId: string
  name: string
  color: string
  away: boolean
  anchor: number
  head: number
}

/** Replaces the set of remote cursors drawn in the editor. */
export const setRemoteCursors = StateEffect.define<RemoteCursor[]>()

class CaretWidget extends WidgetType {
  constructor(readonly c: RemoteCursor) {
    super()
  }
  eq(other: CaretWidget): boolean {
    const a = this.c, b = other.c
    return a.peerId === b.peerId && a.name === b.name && a.color === b.color && a.away === b.away
  }
  toDOM(): HTMLElement {
    const caret = document.createElement("span")
    caret.className = "cm-remote-caret" + (this.c.away ? " cm-remote-away" : "")
    caret.style.borderColor = this.c.color
    caret.dataset.peer = this.c.peerId
    caret.dataset.name = this.c.name
    const label = document.createElement("span")
    label.className = "cm-remote-label"
    label.style.backgroundColor = this.c.color
    label.textContent = this.c.name // textContent: names are never parsed as HTML
    caret.appendChild(label)
    return caret
  }
  ignoreEvent(): boolean {
    return true
  }
}

function build(cursors: RemoteCursor[], length: number): DecorationSet {
  const ranges: Range<Decoration>[] = []
  for (const c of cursors) {
    const head = Math.min(Math.max(c.head, 0), length)
    const anchor = Math.min(Math.max(c.anchor, 0), length)
    if (anchor !== head) {
      ranges.push(
        Decoration.mark({
          class: "cm-remote-selection" + (c.away ? " cm-remote-away" : ""),
          attributes: { style: `background-color: ${c.color}33`, "data-peer": c.peerId },
        }).range(Math.min(anchor, head), Math.max(anchor, head)),
      )
    }
    ranges.push(Decoration.widget({ widget: new CaretWidget(c), side: 1 }).range(head))
  }
  return Decoration.set(ranges, true)
}

/**
 * The extension that draws remote cursors. Between updates the drawn
 * positions are mapped through local edits, so they do not jump while the
 * next authoritative positions (from Automerge cursors) are computed.
 */
export function remoteCursors(): Extension {
  const field = StateField.define<DecorationSet>({
    create: () => Decoration.none,
    update(deco, tr) {
      for (const e of tr.effects) if (e.is(setRemoteCursors)) return build(e.value, tr.state.doc.length)
      return deco.map(tr.changes)
    },
    provide: f => EditorView.decorations.from(f),
  })
  return [
    field,
    EditorView.baseTheme({
      ".cm-remote-caret": {
        position: "relative",
        borderLeft: "2px solid",
        marginLeft: "-1px",
        marginRight: "-1px",
      },
      ".cm-remote-label": {
        position: "absolute",
        top: "-1.35em",
        left: "-2px",
        fontSize: "11px",
        lineHeight: "1.3",
        padding: "0 4px",
        borderRadius: "3px 3px 3px 0",
        color: "white",
        whiteSpace: "nowrap",
        pointerEvents: "none",
        fontFamily: "system-ui, sans-serif",
      },
      ".cm-remote-away": { opacity: "0.4" },
    }),
  ]
}
