MODULE CellEgm
    !
    ! The IRC5 side of the force-controlled cell's EGM link (RobotWare 6.08 or later, IRC5,
    ! option 689-1 Externally Guided Motion). It runs EGM *joint* sessions: every
    ! EGM_SAMPLE_RATE_MS the controller sends one EgmRobot to robot-io on the PC (the UDPUC
    ! device EGM_UC_DEVICE in SIO_cell.cfg) and takes the joint reference robot-io answers.
    !
    ! The cell's simulator reads its EGM parameters from this file (cell-sim, [sim.egm] irc5):
    ! the arguments of EGMSetupUC, EGMActJoint and EGMRunJoint below (\SampleRate,
    ! \CommTimeout, \RampInTime, \RampOutTime, the stop mode, \PosCorrGain), each a literal or
    ! one of the CONSTs, and tests/deploy.rs fails when they disagree with the cell's config.
    ! Change them here, and only here; keep each instruction and CONST on one line.
    !
    ! Load: RobotStudio or FlexPendant, Program Editor -> Load Module, in task T_ROB1; the
    ! configuration first (SIO_cell.cfg, MOC_cell.cfg, then a warm start). docs/commissioning.md
    ! gives the order and what to check. Start: PP to Routine -> CellEgmRun (or call CellEgmRun
    ! from the cell's own main); the module has no main of its own, so it does not clash with
    ! T_ROB1's program.
    !
    ! As ABB's own EGM modules do it (StateMachine Add-In TRobEGM.sys; reference/protocols.md
    ! section 1.8): EGM motion starts and ends in a fine point, and the first movement after a
    ! controller restart cannot be an EGM movement. So CellEgmRun first moves the arm to the
    ! taught cell_home with a MoveAbsJ ending in a fine point (STARTING THE ROUTINE MOVES THE ARM
    ! THERE), and every session waits for the arm to be in position (WaitRob \InPos, then a
    ! zero-length MoveAbsJ to the current joints, fine) before EGMActJoint. The home move is made
    ! once per start, not before each session: after a comm timeout the tool may be in contact,
    ! and a move home would drag it across the part.
    !
    ! Every session re-runs EGMReset, EGMGetId and EGMSetupUC, and its error handler ends it
    ! cleanly (the arm held): a comm timeout starts the next session after EGM_RESTART_WAIT_S,
    ! any other EGM error leaves CellEgmRun with the arm held and the reason on the FlexPendant.
    ! Nothing is RAISEd to a caller.
    !
    ! Not run on a real controller in this repository: written from ABB's public EGM facts
    ! (reference/protocols.md section 1.8); check it in RobotStudio before the first motion.

    ! One EgmRobot every 4 ms (250 Hz, the fastest EGM allows): robot-io's cycle, the simulator's
    ! sim.egm.cycle_ms and every timing bound of the cell (command_timeout_ms = 2 cycles) assume it.
    LOCAL CONST num EGM_SAMPLE_RATE_MS := 4;

    ! No EgmSensor reply for this long: the controller ends the session (EGMRunJoint raises
    ! ERR_UDPUC_COMM) and the arm stops with EGM_STOP_HOLD. Until then it keeps the last joint
    ! reference (and, on some RobotWare, the last speed reference: abb_libegm #104), so this is
    ! the longest a dead PC can leave the arm on its own. 0.2 s = 50 cycles: four times robot-io's
    ! own silence bound (robot_io.egm.silence_timeout_ms 50), so a live robot-io always holds
    ! first; short enough to bound a kept speed reference to 0.2 s. Must be > the longest
    ! scheduling stall the PC is allowed (a real-time core: far below 0.2 s).
    LOCAL CONST num EGM_COMM_TIMEOUT_S := 0.2;

    ! A new session blends from the measured position to robot-io's reference over 0.1 s
    ! (robot-io answers the first EgmRobot with the measured joints, so nothing moves).
    LOCAL CONST num EGM_RAMP_IN_S := 0.1;

    ! A session that ends (comm timeout, EGMStop) brings the reference speed to zero over 0.1 s:
    ! at EGM_MAX_SPEED_DEV_DEG_S (250 deg/s) that is 12.5 deg of travel at most, and robot-io
    ! never lets a reference move faster than its step limiter allows.
    LOCAL CONST num EGM_RAMP_OUT_S := 0.1;

    ! The convergence condition (deg, every joint) and its time: a session must never end because
    ! the arm "converged" (it rests for seconds during teaching), so the time is effectively
    ! forever; sessions end on EGMStop, a comm timeout, or a stopped program.
    LOCAL CONST egm_minmax EGM_COND := [-0.1, 0.1];
    LOCAL CONST num EGM_COND_TIME_S := 1000000;

    ! The reference is robot-io's position (gain 1); robot-io also sends speedRef as the
    ! reference's own velocity (robot_io.egm.send_speed_ref).
    LOCAL CONST num EGM_POS_CORR_GAIN := 1;

    ! The controller's own backstop on the reference speed (deg/s). ABB's guidance: not above the
    ! lowest axis's maximum speed, on the IRB 120 A1-A3's 250 deg/s (A4-A6 reach 320/320/420).
    LOCAL CONST num EGM_MAX_SPEED_DEV_DEG_S := 250;

    ! After a session ended on a comm timeout, wait this long before the next one. The new
    ! session only holds: robot-io comes back idle and answers with the measured position; no
    ! motion resumes until an operator commands one (docs/commissioning.md).
    LOCAL CONST num EGM_RESTART_WAIT_S := 1;

    ! The UDPUC transmission-protocol entry (SIO_cell.cfg) and the external-motion data entry
    ! (MOC_cell.cfg) this module uses, by name.
    LOCAL CONST string EGM_UC_DEVICE := "CellEgm";
    LOCAL CONST string EGM_MOTION_DATA := "CellEgm";

    ! Where the cell starts: the first motion after every start of CellEgmRun (a normal,
    ! non-EGM joint move ending in a fine point). Teach it on the cell (Modify Position) where the
    ! tool is clear of every fixture; the simulated cell starts here (sim.egm.initial_q_deg).
    PERS jointtarget cell_home := [[0, 0, 0, 0, 30, 0], [9E9, 9E9, 9E9, 9E9, 9E9, 9E9]];

    ! The tool the controller models below tool0: TCP (mm, quaternion) and the load the arm
    ! carries (F/T sensor and tool: kg, centre of gravity in tool0 in mm, inertia kg m2), used by
    ! its motion and collision supervision. The simulated cell's tool: 0.5 kg, 40 mm below the
    ! flange (a solid cylinder r 30 mm, 100 mm long), TCP at tool0. On a real cell write the mass and centre of gravity `cell payload
    ! identify` measures plus the sensor body's own (its data sheet; the sensor cannot weigh what
    ! is above its measuring plane).
    PERS tooldata cell_tool := [TRUE, [[0, 0, 0], [1, 0, 0, 0]], [0.5, [0, 0, 40], [1, 0, 0, 0], 0.000529, 0.000529, 0.000225]];

    ! Speeds of the non-EGM moves: home, and the zero-length fine-point move before a session.
    LOCAL CONST speeddata CELL_HOME_SPEED := [100, 30, 5000, 1000];
    LOCAL CONST speeddata CELL_FINE_SPEED := [10, 10, 5000, 1000];

    ! The request: set FALSE (FlexPendant, Program Data, or RWS) to end the running session
    ! cleanly (EGMStop with EGM_STOP_HOLD) and leave CellEgmRun. CellEgmRun sets it TRUE when it
    ! starts, so the next start runs again.
    PERS bool cell_egm_run := TRUE;

    LOCAL VAR egmident egm_id;
    LOCAL VAR intnum stop_request;

    PROC CellEgmRun()
        cell_egm_run := TRUE;
        IDelete stop_request;
        CONNECT stop_request WITH StopRequested;
        IPers cell_egm_run, stop_request;
        MoveAbsJ cell_home, CELL_HOME_SPEED, fine, cell_tool;
        WHILE cell_egm_run DO
            IF NOT CellEgmSession() cell_egm_run := FALSE;
            IF cell_egm_run WaitTime EGM_RESTART_WAIT_S;
        ENDWHILE
        IDelete stop_request;
        EGMReset egm_id;
        TPWrite "CellEgm: left CellEgmRun";
    ENDPROC

    ! One session, everything re-run: wait for the arm at rest in position, a fine point where
    ! it stands, then set up, activate and run until it ends (EGMStop from the trap, a comm
    ! timeout, the program stopped). TRUE: start the next one; FALSE: an EGM error, stop.
    LOCAL FUNC bool CellEgmSession()
        WaitRob \InPos;
        MoveAbsJ CJointT(), CELL_FINE_SPEED, fine, cell_tool;
        EGMReset egm_id;
        EGMGetId egm_id;
        EGMSetupUC ROB_1, egm_id, EGM_MOTION_DATA, EGM_UC_DEVICE \Joint \CommTimeout:=EGM_COMM_TIMEOUT_S;
        EGMActJoint egm_id \Tool:=cell_tool \J1:=EGM_COND \J2:=EGM_COND \J3:=EGM_COND \J4:=EGM_COND \J5:=EGM_COND \J6:=EGM_COND \SampleRate:=EGM_SAMPLE_RATE_MS \MaxSpeedDeviation:=EGM_MAX_SPEED_DEV_DEG_S;
        EGMRunJoint egm_id, EGM_STOP_HOLD \J1 \J2 \J3 \J4 \J5 \J6 \CondTime:=EGM_COND_TIME_S \RampInTime:=EGM_RAMP_IN_S \RampOutTime:=EGM_RAMP_OUT_S \PosCorrGain:=EGM_POS_CORR_GAIN;
        RETURN TRUE;
    ERROR
        EGMReset egm_id;
        IF ERRNO = ERR_UDPUC_COMM THEN
            ! robot-io did not answer for EGM_COMM_TIMEOUT_S (crashed, frozen, link cut): the
            ! session ended and the arm holds. The next session starts after EGM_RESTART_WAIT_S.
            TPWrite "CellEgm: no reply from robot-io, arm held; new session in (s)" \Num:=EGM_RESTART_WAIT_S;
            RETURN TRUE;
        ENDIF
        ! Any other EGM error (a reference out of the joint limits, past \MaxSpeedDeviation, a
        ! session refused): the arm is held; the cell is restarted by starting CellEgmRun again.
        TPWrite "CellEgm: EGM error, arm held; start CellEgmRun again. ERRNO" \Num:=ERRNO;
        RETURN FALSE;
    ENDFUNC

    LOCAL TRAP StopRequested
        IF NOT cell_egm_run EGMStop egm_id, EGM_STOP_HOLD;
    ENDTRAP
ENDMODULE
