import { definePackageTestConfig } from '@webshard/test-config';

export default definePackageTestConfig('playground');
