import { fileURLToPath } from 'node:url'
import { defineConfig } from 'vite'

// The deck shows plots from outside slides/: tools/deck_plots.py renders them into ../assets/plots,
// and `make bench` writes ../results/<machine>/bench-*.png. Let Vite read those two folders (and
// nothing else up there), so the build bundles the images into dist/assets.
const allowed = ['../assets/plots', '../results'].map(p => fileURLToPath(new URL(p, import.meta.url)))

export default defineConfig({
  server: {
    fs: {
      allow: allowed,
    },
  },
})
