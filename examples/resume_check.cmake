# Trains 2 epochs straight, and 1 epoch + save + resume + 1 epoch, and requires the two final
# checkpoints to be the same bytes (parameters, Adam's moments, step, epoch).
#   cmake -DEXE=train_fashion_mnist -DWORK=dir -P resume_check.cmake
set(common --epochs 2 --limit 3000 --batch 100 --threads 2 --quiet)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
function(run)
  execute_process(COMMAND "${EXE}" ${common} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${EXE} ${ARGN}:\n${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${err}")
  endif()
  if(NOT out MATCHES "test_accuracy=[0-9.]+\n$")
    message(FATAL_ERROR "the last line is not test_accuracy=<value>")
  endif()
endfunction()
run(--save "${WORK}/straight.safetensors")
run(--stop-after 1 --save "${WORK}/half.safetensors")
run(--resume "${WORK}/half.safetensors" --save "${WORK}/resumed.safetensors")
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK}/straight.safetensors" "${WORK}/resumed.safetensors"
                RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  message(FATAL_ERROR "resuming did not reproduce the straight run's checkpoint")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK}/straight.safetensors" "${WORK}/half.safetensors"
                RESULT_VARIABLE differ)
if(differ EQUAL 0)
  message(FATAL_ERROR "the half-way checkpoint equals the final one: nothing was trained")
endif()
