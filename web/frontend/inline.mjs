// node inline.mjs INDEX.html APP.js STYLE.css OUT.html: one self-contained page (the server's
// Content-Security-Policy allows inline code only, and csp-web --html writes a single file).
import { readFileSync, writeFileSync } from 'node:fs';

const [index, app, style, out] = process.argv.slice(2);
const script = readFileSync(app, 'utf8').replaceAll('</script', '<\\/script');
const html = readFileSync(index, 'utf8')
  .replace('/*CSP_STYLE*/', () => readFileSync(style, 'utf8'))
  .replace('/*CSP_SCRIPT*/', () => script);
writeFileSync(out, html);
