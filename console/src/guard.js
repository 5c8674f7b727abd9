// "Leave with unsaved edits?": one guard at a time (the editor's), asked before the hash route
// changes and, through beforeunload, before the page is left or reloaded.
let current = null;

/** Install `isDirty` (a function) as the guard; returns the function that removes it. */
export function guardLeaving(isDirty) {
  current = isDirty;
  const beforeUnload = (e) => {
    if (current && current()) { e.preventDefault(); e.returnValue = ""; }
  };
  window.addEventListener("beforeunload", beforeUnload);
  return () => {
    if (current === isDirty) current = null;
    window.removeEventListener("beforeunload", beforeUnload);
  };
}

export const LEAVE_MESSAGE = "This graph has unsaved edits. Leave and lose them?";

/** True when the route may change now (no unsaved edits, or the user said to leave). */
export function mayLeave() {
  return !(current && current()) || window.confirm(LEAVE_MESSAGE);
}
