// Builds the console into the Python package (gateway/console/static), with fixed names the
// server's shell page refers to. `npm ci && npm run build` rebuilds it; the output is committed.
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

export default defineConfig({
  plugins: [react()],
  base: "/console/assets/",
  build: {
    outDir: "../gateway/console/static",
    emptyOutDir: false,
    modulePreload: false,
    sourcemap: false,
    rollupOptions: {
      input: "src/main.jsx",
      output: {
        entryFileNames: "console.js",
        chunkFileNames: "console-[name].js",
        assetFileNames: "console.[ext]",
      },
    },
  },
});
