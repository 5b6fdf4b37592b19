// The colour of an operation: fixed for gsched's layer kinds, a hash for others. Shared by the
// status page (/static/colours.js) and the performance report (inlined by report.c).
'use strict';
function gsColour(name) {
  const known = { fused: '#43a047', combine: '#1e88e5', literal: '#8e24aa', copy: '#fb8c00', linalg: '#e53935' };
  if (known[name]) return known[name];
  let h = 0;
  for (const c of name) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return 'hsl(' + (h % 360) + ',65%,50%)';
}
