import { runCli } from '../program.js';
import { registerDoctorCommand } from '../commands/doctor.js';

await runCli([registerDoctorCommand]);
