import { definePackageConfig } from '@webshard/build';
import { defineConfig } from 'tsup';

export default defineConfig(definePackageConfig());
