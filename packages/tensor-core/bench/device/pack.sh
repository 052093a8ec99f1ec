#!/bin/bash
# Packs what bench/device/*.mjs need on a machine with a GPU and no registry (the device machine of
# the tensor-core README's "WebGPU on a real GPU" section): node, the built tensor-core, the
# `webgpu` package's Dawn for linux-x64, and the scripts, into $1 (default .dev at the repository
# root, which .git/info/exclude should list). Run `pnpm build` first. There, unpack and run:
#   python3 -c "import lzma,shutil;[shutil.copyfileobj(lzma.open(s),open(d,'wb')) for s,d in
#     [('node.xz','node'),('node_modules/webgpu/dist/linux-x64/dawn.node.xz','node_modules/webgpu/dist/linux-x64/dawn.node')]]"
#   chmod +x node; VK_ICD_FILENAMES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ./node gpu-check.mjs
# (Vulkan's loader, libvulkan1 and libglvnd's libraries, may have to come along as .deb files.)
set -euo pipefail
root=$(git rev-parse --show-toplevel)
out=${1:-$root/.dev}
core=$root/packages/tensor-core
dawn=$(dirname "$(node -e "console.log(require.resolve('webgpu/package.json', { paths: ['$core'] }))")")
mkdir -p "$out/node_modules/@webshard/tensor-core" "$out/node_modules/webgpu/dist/linux-x64"
cp "$core/package.json" "$out/node_modules/@webshard/tensor-core/"
rm -rf "$out/node_modules/@webshard/tensor-core/dist"
cp -r "$core/dist" "$out/node_modules/@webshard/tensor-core/"
find "$out/node_modules/@webshard/tensor-core/dist" \( -name '*.map' -o -name '*.d.ts' -o -name '*.d.cts' \) -delete
cp "$dawn/index.js" "$dawn/package.json" "$out/node_modules/webgpu/"
xz -T0 -6 -c "$dawn/dist/linux-x64/dawn.node" > "$out/node_modules/webgpu/dist/linux-x64/dawn.node.xz"
xz -T0 -6 -c "$(command -v node)" > "$out/node.xz"
cp "$core"/bench/device/*.mjs "$out/"
du -sh "$out"
